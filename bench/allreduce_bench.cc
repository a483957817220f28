// allreduce_bench: collectives::Allreduce over the TCP or the shared-memory transport, in the
// style of nccl-tests' all_reduce_perf. No negotiation, fusion or background thread: this is the
// ceiling the engine can reach, to be compared with memcpy and the reduction kernel on the same
// machine. With --api 1 the same loop runs through the public API instead (hvd::Init, then
// hvd::Allreduce: negotiation, response cache, fusion and the background thread included).
//
//   allreduce_bench -np 4 [-b 4K] [-e 256M] [-f 2] [--sizes 4K,1M,..] [-t float32] [-o sum]
//                   [--iters auto|N] [--warmup N] [--check 1] [--transport tcp|shm]
//                   [--direct-max B] [--chunk B] [--api 0|1] [--results 0|1]
//
// --results 1 adds one machine-readable line per size (bench/peers/report.py reads them):
//   RESULT impl=hvd-shm np=2 bytes=4096 iters=1000 us=1.2 wrong=0 memcpy_gbs=.. reduce2t_gbs=..
//
// Without HVD_SIZE in the environment it forks -np rank processes that meet through a file store
// in a fresh temp directory; with HVD_SIZE/HVD_RANK/HVD_RENDEZVOUS set (e.g. under hvdrun) it is
// one rank (the launcher is bench_util.h's). busbw = algbw * 2(N-1)/N is what a ring moves per
// link, so it is comparable across N.
// Exit status: 0 ok, 1 wrong results, 2 bad arguments, 3 a rank failed.
#include <signal.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "bench_util.h"
#include "collectives/collectives.h"
#include "collectives/reduce.h"
#include "hvd/hvd.h"
#include "hvd/status.h"
#include "hvd/types.h"
#include "rendezvous/store.h"
#include "transport/connect.h"

namespace hvd::bench {
namespace {

using runtime::collectives::Comm;
namespace coll = runtime::collectives;

constexpr double kTargetSeconds = 0.3;  // each timed loop lasts at least this long...
constexpr int kMaxIters = 1000;         // ...unless it would take more iterations than this
constexpr double kRefSeconds = 0.1;     // per memory-bandwidth reference measurement

struct Options {
  int np = 2;
  bool np_given = false;
  size_t min_bytes = 4 << 10, max_bytes = 256 << 20, factor = 2;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int iters = 0;  // 0: auto
  int warmup = 5;
  bool check = true;
  std::string transport = "tcp";
  size_t direct_max = 0;  // 0: the runtime's default for the transport (core/comm_setup.cc)
  bool direct_given = false;
  size_t chunk = 256 << 10;
  std::vector<size_t> sizes;  // --sizes: exactly these, instead of -b/-e/-f
  bool api = false;
  bool results = false;
};

struct Ref {
  double memcpy_gbs = 0, reduce_gbs = 0;
};

[[noreturn]] void Usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "allreduce_bench: %s\n", error.c_str());
  std::fprintf(error.empty() ? stdout : stderr,
               "usage: allreduce_bench -np N [-b 4K] [-e 256M] [-f 2] [-t float32] [-o sum]\n"
               "                       [--iters auto|N] [--warmup N] [--check 0|1]\n"
               "                       [--transport tcp|shm] [--direct-max B] [--chunk B]\n"
               "  -np      ranks to fork (1..64); under HVD_SIZE it must match or be left out\n"
               "  -b, -e   smallest, largest buffer in bytes; suffix K, M or G (x1024)\n"
               "  -f       size multiplier between rows (integer >= 2)\n"
               "  -t       float32 float64 float16 bfloat16 int8 uint8 int32 int64\n"
               "  -o       sum average min max product\n"
               "  --transport   tcp (127.0.0.1, default) or shm (shared memory)\n"
               "  --direct-max  latency path while (N-1) x size <= this (0: never); default: the\n"
               "                runtime's for the transport (64K shm, 256K tcp)\n"
               "  --chunk       the ring's chunk size (default 256K)\n"
               "  --sizes       comma-separated sizes, e.g. 4K,64K,1M (instead of -b/-e/-f)\n"
               "  --api 1       through hvd::Init/hvd::Allreduce (the full runtime path); the\n"
               "                transport then follows HVD_SHM like any job's\n"
               "  --results 1   also print a RESULT line per size (bench/peers/report.py)\n");
  std::exit(error.empty() ? 0 : kExitUsage);
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  ParseFlagPairs(argc, argv, Usage,
                 [&](const std::string& flag, const char* v, const BadValue& bad) {
                   long long n;
                   if (flag == "-np") {
                     if (!ParseInt(v, 1, 64, &n)) bad("a rank count 1..64, e.g. -np 4");
                     o.np = static_cast<int>(n);
                     o.np_given = true;
                   } else if (flag == "-b" || flag == "--minbytes") {
                     if (!ParseBytes(v, &o.min_bytes)) bad("a size like 4096, 4K, 1M or 1G");
                   } else if (flag == "-e" || flag == "--maxbytes") {
                     if (!ParseBytes(v, &o.max_bytes)) bad("a size like 4096, 4K, 256M or 1G");
                   } else if (flag == "-f" || flag == "--stepfactor") {
                     if (!ParseInt(v, 2, 1024, &n)) bad("an integer factor >= 2, e.g. -f 2");
                     o.factor = static_cast<size_t>(n);
                   } else if (flag == "-t" || flag == "--datatype") {
                     int t = 0;
                     while (t < kNumDataTypes && DataTypeName(static_cast<DataType>(t)) != v) ++t;
                     if (t == kNumDataTypes)
                       bad("one of float32 float64 float16 bfloat16 int8 uint8 int32 int64");
                     o.dtype = static_cast<DataType>(t);
                   } else if (flag == "-o" || flag == "--op") {
                     int p = 0;
                     while (p < kNumReduceOps && ReduceOpName(static_cast<ReduceOp>(p)) != v) ++p;
                     if (p == kNumReduceOps) bad("one of sum average min max product");
                     o.op = static_cast<ReduceOp>(p);
                   } else if (flag == "--iters" || flag == "-n") {
                     if (std::string(v) == "auto") {
                       o.iters = 0;
                     } else if (!ParseInt(v, 1, 1000000, &n)) {
                       bad("'auto' or an iteration count 1..1000000");
                     } else {
                       o.iters = static_cast<int>(n);
                     }
                   } else if (flag == "--warmup" || flag == "-w") {
                     if (!ParseInt(v, 0, 1000000, &n)) bad("a warmup iteration count >= 0");
                     o.warmup = static_cast<int>(n);
                   } else if (flag == "--transport") {
                     if (std::string(v) != "tcp" && std::string(v) != "shm") bad("tcp or shm");
                     o.transport = v;
                   } else if (flag == "--direct-max") {
                     o.direct_given = true;
                     if (std::string(v) == "0") {
                       o.direct_max = 0;
                     } else if (!ParseBytes(v, &o.direct_max)) {
                       bad("a size like 0, 4K or 64K");
                     }
                   } else if (flag == "--chunk") {
                     if (!ParseBytes(v, &o.chunk)) bad("a size like 64K or 256K");
                   } else if (flag == "--sizes") {
                     o.sizes.clear();
                     std::string list = v;
                     for (size_t start = 0; start <= list.size();) {
                       size_t comma = list.find(',', start);
                       if (comma == std::string::npos) comma = list.size();
                       size_t b;
                       if (!ParseBytes(list.substr(start, comma - start), &b)) {
                         bad("comma-separated sizes like 4K,64K,1M");
                       }
                       o.sizes.push_back(b);
                       start = comma + 1;
                     }
                   } else if (flag == "--api") {
                     if (!ParseInt(v, 0, 1, &n)) bad("0 or 1");
                     o.api = n == 1;
                   } else if (flag == "--results") {
                     if (!ParseInt(v, 0, 1, &n)) bad("0 or 1");
                     o.results = n == 1;
                   } else if (flag == "--check" || flag == "-c") {
                     if (!ParseInt(v, 0, 1, &n)) bad("0 or 1");
                     o.check = n == 1;
                   } else {
                     return false;
                   }
                   return true;
                 });
  if (o.min_bytes > o.max_bytes) Usage("-b: must not exceed -e");
  return o;
}

std::vector<size_t> Sizes(const Options& o) {
  if (!o.sizes.empty()) return o.sizes;
  std::vector<size_t> sizes;
  for (size_t b = o.min_bytes; b <= o.max_bytes; b *= o.factor) {
    sizes.push_back(b);
    if (b > o.max_bytes / o.factor) break;  // the next step would overflow or pass -e anyway
  }
  return sizes;
}

// ---- Element access: every type through double, with exact small-integer test patterns. ----

template <typename T>
double Load(const void* p, size_t i) {
  return static_cast<double>(static_cast<const T*>(p)[i]);
}
template <typename T>
void Store(void* p, size_t i, double v) {
  static_cast<T*>(p)[i] = std::is_integral_v<T> ? static_cast<T>(std::llround(v)) : T(v);
}
double LoadF16(const void* p, size_t i) {
  return coll::HalfToFloat(static_cast<const uint16_t*>(p)[i]);
}
void StoreF16(void* p, size_t i, double v) {
  static_cast<uint16_t*>(p)[i] = coll::FloatToHalf(v);
}
double LoadBF16(const void* p, size_t i) {
  return coll::BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
}
void StoreBF16(void* p, size_t i, double v) {
  static_cast<uint16_t*>(p)[i] = coll::FloatToBFloat16(v);
}

struct Codec {
  double (*get)(const void*, size_t);
  void (*put)(void*, size_t, double);
};

// Indexed by DataType, whose values are fixed by the C ABI.
const Codec& CodecFor(DataType t) {
  static const Codec kCodecs[kNumDataTypes] = {
      {Load<float>, Store<float>},
      {Load<double>, Store<double>},
      {LoadF16, StoreF16},
      {LoadBF16, StoreBF16},
      {Load<int8_t>, Store<int8_t>},
      {Load<uint8_t>, Store<uint8_t>},
      {Load<int32_t>, Store<int32_t>},
      {Load<int64_t>, Store<int64_t>},
  };
  return kCodecs[static_cast<int>(t)];
}

// The largest integer every partial result must stay within to be exact in type `t`.
double MaxExact(DataType t) {
  // float32 float64 float16 bfloat16 int8 uint8 int32 int64, as DataType numbers them.
  static const double kMaxExact[kNumDataTypes] = {1 << 24, 1 << 24, 2048,    256,
                                                  127,     255,     1 << 24, 1 << 24};
  return kMaxExact[static_cast<int>(t)];
}

// Rank `r`'s element `i`. Sums stay within MaxExact; a product has exactly k factors of 2.
double Pattern(ReduceOp op, DataType t, int r, int np, size_t i) {
  if (op == ReduceOp::kProduct) {
    int k = std::min<int>(np, static_cast<int>(std::log2(MaxExact(t))) - 1);
    return (i + r) % np < static_cast<size_t>(k) ? 2 : 1;
  }
  if (op == ReduceOp::kMin || op == ReduceOp::kMax) return (i * 7 + r * 13) % 16;
  size_t m = std::clamp<size_t>(static_cast<size_t>(MaxExact(t) / np) + 1, 2, 8);
  return (i * 7 + r * 3 + 1) % m;
}

void Fill(void* buf, size_t count, const Options& o, int rank, int np) {
  const Codec& c = CodecFor(o.dtype);
  for (size_t i = 0; i < count; ++i) c.put(buf, i, Pattern(o.op, o.dtype, rank, np, i));
}

int64_t CountWrong(const void* buf, size_t count, const Options& o, int np) {
  // Averages are scaled in floating point (relative error) or rounded to an integer (absolute).
  double tol = 0;
  const bool relative = static_cast<int>(o.dtype) < static_cast<int>(DataType::kInt8);
  if (o.op == ReduceOp::kAverage) {
    // float32 float64 float16 bfloat16 int8 uint8 int32 int64
    static const double kTolerance[kNumDataTypes] = {1e-6, 1e-6, 1e-2, 1e-2, 0.5, 0.5, 0.5, 0.5};
    tol = kTolerance[static_cast<int>(o.dtype)];
  }
  const Codec& c = CodecFor(o.dtype);
  int64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double e = Pattern(o.op, o.dtype, 0, np, i);
    for (int r = 1; r < np; ++r) {
      double v = Pattern(o.op, o.dtype, r, np, i);
      e = o.op == ReduceOp::kMin       ? std::min(e, v)
          : o.op == ReduceOp::kMax     ? std::max(e, v)
          : o.op == ReduceOp::kProduct ? e * v
                                       : e + v;  // sum, average
    }
    if (o.op == ReduceOp::kAverage) e /= np;
    double got = c.get(buf, i);
    double bound = relative ? tol * std::max(1.0, std::fabs(e)) : tol;
    if (!(std::fabs(got - e) <= bound)) ++wrong;
  }
  return wrong;
}

// ---- Single-process memory references. ----

// memcpy of `bytes`, and a float32 sum-reduce of `bytes` (the collectives' own kernel) split
// over two threads, as a single-process ceiling for algbw at that size.
Ref MeasureReference(size_t bytes) {
  size_t n = bytes / sizeof(float);
  std::vector<float> a(n, 1.0f), b(n, 0.5f);
  Ref ref;
  ref.memcpy_gbs =
      bytes /
      TimePerCall(
          [&] {
            std::memcpy(a.data(), b.data(), n * sizeof(float));
            asm volatile("" ::: "memory");  // keep the copy: nothing reads `a` in the loop
          },
          kRefSeconds) /
      1e9;

  size_t half = n / 2;
  std::barrier sync(2);
  bool stop = false;  // written before a barrier phase, read after it
  std::thread helper([&] {
    for (;;) {
      sync.arrive_and_wait();
      if (stop) return;
      coll::ReduceInto(a.data() + half, b.data() + half, n - half, DataType::kFloat32,
                       ReduceOp::kSum);
      sync.arrive_and_wait();
    }
  });
  ref.reduce_gbs =
      bytes /
      TimePerCall(
          [&] {
            sync.arrive_and_wait();
            coll::ReduceInto(a.data(), b.data(), half, DataType::kFloat32, ReduceOp::kSum);
            sync.arrive_and_wait();
          },
          kRefSeconds) /
      1e9;
  stop = true;
  sync.arrive_and_wait();
  helper.join();
  return ref;
}

// ---- One rank. ----

// What the timed loop runs: the collective layer over one transport, or the public API.
struct Path {
  int rank = 0, np = 1;
  std::string impl;  // RESULT's impl= name: hvd-shm, hvd-tcp, hvd-api
  std::function<Status(void* buf, size_t count, DataType dtype, ReduceOp op)> allreduce;
  std::function<Status()> barrier;
};

double MaxAcrossRanks(const Path& path, double v, Status* s) {
  if (s->ok()) *s = path.allreduce(&v, 1, DataType::kFloat64, ReduceOp::kMax);
  return v;
}

// Times `iters` allreduces; returns the slowest rank's seconds.
double TimedLoop(const Path& path, void* buf, size_t count, const Options& o, int iters,
                 Status* s) {
  if (s->ok()) *s = path.barrier();
  auto t0 = Clock::now();
  for (int i = 0; i < iters && s->ok(); ++i) *s = path.allreduce(buf, count, o.dtype, o.op);
  return MaxAcrossRanks(path, SecondsSince(t0), s);
}

// Every rank runs this with the same sizes; iteration counts are derived from max-reduced times,
// so all ranks agree on them without talking about it. `refs` (one per size) only on rank 0.
Status RunSizes(const Path& path, const Options& o, const std::vector<Ref>& refs, int64_t* wrong) {
  const int rank = path.rank, np = path.np;
  const size_t esize = DataTypeSize(o.dtype);
  std::vector<size_t> sizes = Sizes(o);
  std::unique_ptr<char[]> buf(new char[*std::max_element(sizes.begin(), sizes.end())]);
  if (rank == 0) {
    std::printf("# %10s %11s %8s %7s %7s %11s %12s %12s %8s %13s %14s\n", "size(B)", "count",
                "type", "redop", "iters", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong",
                "memcpy(GB/s)", "reduce2t(GB/s)");
  }
  Status s;
  for (size_t k = 0; k < sizes.size() && s.ok(); ++k) {
    size_t count = sizes[k] / esize, bytes = count * esize;
    if (count == 0) continue;
    Fill(buf.get(), count, o, rank, np);
    for (int i = 0; i < o.warmup && s.ok(); ++i) {
      s = path.allreduce(buf.get(), count, o.dtype, o.op);
    }
    int iters = o.iters;
    if (iters == 0) {
      // Grow a probe loop to >= 1/10 of the target, then extrapolate.
      int n = 1;
      double t = TimedLoop(path, buf.get(), count, o, n, &s);
      while (s.ok() && t < kTargetSeconds / 10 && n < kMaxIters) {
        n = std::min(kMaxIters, n * 4);
        t = TimedLoop(path, buf.get(), count, o, n, &s);
      }
      iters = std::clamp(static_cast<int>(std::ceil(kTargetSeconds * n / std::max(t, 1e-9))), 1,
                         kMaxIters);
    }
    double seconds = TimedLoop(path, buf.get(), count, o, iters, &s);
    int64_t size_wrong = 0;
    if (o.check && s.ok()) {
      Fill(buf.get(), count, o, rank, np);
      s = path.allreduce(buf.get(), count, o.dtype, o.op);
      size_wrong = s.ok() ? CountWrong(buf.get(), count, o, np) : 0;
      if (s.ok()) s = path.allreduce(&size_wrong, 1, DataType::kInt64, ReduceOp::kSum);
    }
    if (!s.ok()) break;
    *wrong += size_wrong;
    if (rank == 0) {
      double per_op = seconds / iters;
      double algbw = bytes / per_op / 1e9;
      double busbw = algbw * 2.0 * (np - 1) / np;
      std::string wrong_text = o.check ? std::to_string(size_wrong) : "N/A";
      std::printf("  %10zu %11zu %8s %7s %7d %11.1f %12.3f %12.3f %8s %13.2f %14.2f\n", bytes,
                  count, std::string(DataTypeName(o.dtype)).c_str(),
                  std::string(ReduceOpName(o.op)).c_str(), iters, per_op * 1e6, algbw, busbw,
                  wrong_text.c_str(), refs[k].memcpy_gbs, refs[k].reduce_gbs);
      if (o.results) {
        std::printf(
            "RESULT impl=%s np=%d bytes=%zu iters=%d us=%.3f wrong=%s memcpy_gbs=%.3f "
            "reduce2t_gbs=%.3f\n",
            path.impl.c_str(), np, bytes, iters, per_op * 1e6,
            o.check ? std::to_string(size_wrong).c_str() : "-1", refs[k].memcpy_gbs,
            refs[k].reduce_gbs);
      }
      std::fflush(stdout);
    }
  }
  return s;
}

void PrintHeader(const Options& o, const std::string& what, int np) {
  std::printf("# allreduce_bench: %s, %d ranks\n", what.c_str(), np);
  std::printf("# machine: %s\n", MachineLine().c_str());
  std::printf(
      "# warmup %d, iters %s, check %s; busbw = algbw * 2(N-1)/N; time is the slowest"
      " rank's\n# memcpy, reduce2t: one process, same size (reduce2t: 2 threads of"
      " the float32 sum kernel, a[i] += b[i])\n",
      o.warmup, o.iters ? std::to_string(o.iters).c_str() : "auto (>= 0.3 s, <= 1000)",
      o.check ? "on" : "off");
}

// The collective layer over a transport of its own.
Status RunCollectives(const Options& o, const RankEnv& env, const std::vector<Ref>& refs,
                      int64_t* wrong) {
  const int rank = env.rank, np = env.size;
  std::unique_ptr<runtime::rendezvous::Store> store;
  HVD_RETURN_IF_ERROR(runtime::rendezvous::OpenStore(env.rendezvous, &store));
  runtime::transport::ConnectOptions copts;
  copts.hosts.assign(np, "localhost");
  copts.use_shm = o.transport == "shm";
  copts.tcp.scope = "bench";
  copts.tcp.connect_timeout = std::chrono::seconds(120);
  copts.shm.scope = "bench";
  copts.shm.connect_timeout = std::chrono::seconds(120);
  std::unique_ptr<runtime::transport::Transport> transport;
  HVD_RETURN_IF_ERROR(runtime::transport::Connect(*store, rank, np, copts, &transport));
  Comm comm;
  comm.transport = transport.get();
  comm.direct_max_bytes =
      o.direct_given ? o.direct_max : (o.transport == "shm" ? size_t{64} << 10 : size_t{256} << 10);
  comm.ring_chunk_bytes = o.chunk;
  if (rank == 0) {
    PrintHeader(o,
                std::string("collectives::Allreduce over ") +
                    (o.transport == "shm" ? "shared memory" : "TCP 127.0.0.1"),
                np);
  }
  Path path;
  path.rank = rank;
  path.np = np;
  path.impl = "hvd-" + o.transport;
  path.allreduce = [&comm](void* buf, size_t count, DataType dtype, ReduceOp op) {
    return coll::Allreduce(comm, buf, count, dtype, op);
  };
  path.barrier = [&comm] { return coll::Barrier(comm); };
  return RunSizes(path, o, refs, wrong);
}

// The public API: Init reads HVD_RANK/HVD_SIZE/HVD_RENDEZVOUS (set by LaunchRanks or hvdrun).
Status RunApi(const Options& o, const RankEnv& env, const std::vector<Ref>& refs, int64_t* wrong) {
  HVD_RETURN_IF_ERROR(hvd::Init());
  if (env.rank == 0) {
    PrintHeader(o, "hvd::Allreduce (negotiation, cache, fusion, background thread)", env.size);
  }
  Path path;
  path.rank = env.rank;
  path.np = env.size;
  path.impl = "hvd-api";
  path.allreduce = [](void* buf, size_t count, DataType dtype, ReduceOp op) {
    // One name per buffer size and type: every iteration after the first is a cache hit.
    Tensor t = MakeTensor(buf, dtype, static_cast<int64_t>(count));
    AllreduceOptions options;
    options.op = op;
    return hvd::Allreduce("bench." + std::to_string(count) + "." +
                              std::string(DataTypeName(dtype)) + "." +
                              std::string(ReduceOpName(op)),
                          t, t, options);
  };
  path.barrier = [] { return hvd::Barrier(); };
  Status s = RunSizes(path, o, refs, wrong);
  Status down = hvd::Shutdown();
  return s.ok() ? down : s;
}

// `env` says who this rank is and where the rendezvous store is (forked or under hvdrun).
int RunRank(const Options& o, const RankEnv& env, std::vector<Ref> refs) {
  const int rank = env.rank;
  signal(SIGPIPE, SIG_IGN);  // a dead peer must be an error status, not a silent exit
  if (rank == 0 && refs.empty()) {
    // Launched externally: measure before meeting the others, while they idle in rendezvous.
    for (size_t bytes : Sizes(o)) refs.push_back(MeasureReference(bytes));
  }
  int64_t wrong = 0;
  Status s = o.api ? RunApi(o, env, refs, &wrong) : RunCollectives(o, env, refs, &wrong);
  if (!s.ok()) {
    std::fprintf(stderr, "allreduce_bench: rank %d: %s\n", rank, s.ToString().c_str());
    return kExitFailed;
  }
  if (rank == 0) std::printf("# wrong values: %lld\n", static_cast<long long>(wrong));
  std::fflush(stdout);
  return wrong == 0 ? 0 : kExitWrong;
}

int LaunchAll(const Options& o) {
  std::vector<Ref> refs;  // measured before forking, while nothing else runs
  for (size_t bytes : Sizes(o)) refs.push_back(MeasureReference(bytes));
  return LaunchRanks("allreduce_bench", o.np, [&](const RankEnv& env) {
    return RunRank(o, env, env.rank == 0 ? refs : std::vector<Ref>());
  });
}

}  // namespace
}  // namespace hvd::bench

int main(int argc, char** argv) {
  using namespace hvd::bench;
  Options o = ParseArgs(argc, argv);
  std::string error;
  std::optional<RankEnv> env = RankFromEnvironment(o.np_given ? o.np : 0, &error);
  if (!error.empty()) Usage(error);
  if (!env) return LaunchAll(o);
  return RunRank(o, *env, {});
}
