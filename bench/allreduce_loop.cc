#include "allreduce_loop.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>

#include "bench_util.h"
#include "collectives/reduce.h"

namespace hvd::bench {
namespace coll = runtime::collectives;

namespace {

constexpr double kRefSeconds = 0.1;  // per memory-bandwidth reference measurement
constexpr size_t kBufferAlignment = 64;

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
// bool: one byte, any non-zero byte true.
double LoadBool(const void* p, size_t i) {
  return static_cast<const uint8_t*>(p)[i] != 0 ? 1 : 0;
}
void StoreBool(void* p, size_t i, double v) {
  static_cast<uint8_t*>(p)[i] = v != 0 ? 1 : 0;
}

bool IsFloat(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 ||
         t == DataType::kBFloat16;
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
      {Load<int16_t>, Store<int16_t>},
      {LoadBool, StoreBool},
  };
  return kCodecs[static_cast<int>(t)];
}

// The largest integer every partial result must stay within to be exact in type `t`.
double MaxExact(DataType t) {
  // float32 float64 float16 bfloat16 int8 uint8 int32 int64 int16 bool, as DataType numbers them.
  static const double kMaxExact[kNumDataTypes] = {1 << 24, 1 << 24, 2048,    256,   127,
                                                  255,     1 << 24, 1 << 24, 32767, 1};
  return kMaxExact[static_cast<int>(t)];
}

// Rank `r`'s element `i`. Sums stay within MaxExact; a product has exactly k factors of 2. bool:
// for or (sum, max) at most one rank is true, for and (min, product) at most one is false, so
// that both results occur (element i's odd one out is rank i % (np + 1); none when it is np).
double Pattern(ReduceOp op, DataType t, int r, int np, size_t i) {
  if (t == DataType::kBool) {
    const bool odd_one = i % static_cast<size_t>(np + 1) == static_cast<size_t>(r);
    return (op == ReduceOp::kSum || op == ReduceOp::kMax) == odd_one ? 1 : 0;
  }
  if (op == ReduceOp::kProduct) {
    int k = std::min<int>(np, static_cast<int>(std::log2(MaxExact(t))) - 1);
    return (i + r) % np < static_cast<size_t>(k) ? 2 : 1;
  }
  if (op == ReduceOp::kMin || op == ReduceOp::kMax) return (i * 7 + r * 13) % 16;
  size_t m = std::clamp<size_t>(static_cast<size_t>(MaxExact(t) / np) + 1, 2, 8);
  return (i * 7 + r * 3 + 1) % m;
}

void Fill(void* buf, size_t count, const LoopOptions& o, int rank, int np) {
  const Codec& c = CodecFor(o.dtype);
  for (size_t i = 0; i < count; ++i) c.put(buf, i, Pattern(o.op, o.dtype, rank, np, i));
}

int64_t CountWrong(const void* buf, size_t count, const LoopOptions& o, int np) {
  // Averages are scaled in floating point (relative error) or rounded to an integer (absolute).
  double tol = 0;
  const bool relative = IsFloat(o.dtype);
  if (o.op == ReduceOp::kAverage) {
    // float32 float64 float16 bfloat16 int8 uint8 int32 int64 int16 bool (bool has no average)
    static const double kTolerance[kNumDataTypes] = {1e-6, 1e-6, 1e-2, 1e-2, 0.5,
                                                     0.5,  0.5,  0.5,  0.5,  0};
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
    if (o.dtype == DataType::kBool) e = e != 0 ? 1 : 0;  // sum is or; product of 0/1 is and
    double got = c.get(buf, i);
    double bound = relative ? tol * std::max(1.0, std::fabs(e)) : tol;
    if (!(std::fabs(got - e) <= bound)) ++wrong;
  }
  return wrong;
}

// Where path.allreduce(buf, ...) left its result: buf, or an out-of-place path's output.
const void* ResultAt(const Path& path, const void* buf) {
  return path.result ? path.result(buf) : buf;
}

template <typename T>
T ResultOf(const Path& path, const T* buf) {
  T v;
  std::memcpy(&v, ResultAt(path, buf), sizeof v);
  return v;
}

// Every rank gets the same value (the iteration counts below derive from it: a rank reading its
// own input instead, out of place, ran another count than its peers and left them waiting).
double MaxAcrossRanks(const Path& path, double v, Status* s) {
  if (!s->ok()) return v;
  *s = path.allreduce(&v, 1, DataType::kFloat64, ReduceOp::kMax);
  return ResultOf(path, &v);
}

// Times `iters` allreduces; returns the slowest rank's seconds.
double TimedLoop(const Path& path, void* buf, size_t count, const LoopOptions& o, int iters,
                 Status* s) {
  if (s->ok()) *s = path.barrier();
  auto t0 = Clock::now();
  for (int i = 0; i < iters && s->ok(); ++i) *s = path.allreduce(buf, count, o.dtype, o.op);
  return MaxAcrossRanks(path, SecondsSince(t0), s);
}

}  // namespace

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

const char kLoopFlagsUsage[] =
    "  --sizes       comma-separated sizes, e.g. 4K,64K,1M; suffix K, M or G (x1024)\n"
    "  -t            float32 float64 float16 bfloat16 int8 uint8 int32 int64 int16 bool\n"
    "  -o            sum average min max product (bool: sum/max are or, min/product and)\n"
    "  --iters       auto (each timed loop >= 0.3 s, <= 1000 ops) or a count\n"
    "  --warmup N    untimed operations per size (default 5; at most 64 MiB of warmup traffic,\n"
    "                but at least min(N, 16))\n"
    "  --check 0|1   check every element after timing (default 1)\n"
    "  --results 1   also print a machine-readable RESULT line per size\n";

bool ParseLoopFlag(const std::string& flag, const char* v, const BadValue& bad, LoopOptions* o) {
  long long n;
  if (flag == "-t" || flag == "--datatype") {
    int t = 0;
    while (t < kNumDataTypes && DataTypeName(static_cast<DataType>(t)) != v) ++t;
    if (t == kNumDataTypes)
      bad("one of float32 float64 float16 bfloat16 int8 uint8 int32 int64 int16 bool");
    o->dtype = static_cast<DataType>(t);
  } else if (flag == "-o" || flag == "--op") {
    int p = 0;
    while (p < kNumReduceOps && ReduceOpName(static_cast<ReduceOp>(p)) != v) ++p;
    if (p == kNumReduceOps) bad("one of sum average min max product");
    o->op = static_cast<ReduceOp>(p);
  } else if (flag == "--iters" || flag == "-n") {
    if (std::string(v) == "auto") {
      o->iters = 0;
    } else if (!ParseInt(v, 1, 1000000, &n)) {
      bad("'auto' or an iteration count 1..1000000");
    } else {
      o->iters = static_cast<int>(n);
    }
  } else if (flag == "--warmup" || flag == "-w") {
    if (!ParseInt(v, 0, 1000000, &n)) bad("a warmup iteration count >= 0");
    o->warmup = static_cast<int>(n);
  } else if (flag == "--sizes") {
    if (!ParseByteList(v, &o->sizes)) bad("comma-separated sizes like 4K,64K,1M");
  } else if (flag == "--results") {
    if (!ParseInt(v, 0, 1, &n)) bad("0 or 1");
    o->results = n == 1;
  } else if (flag == "--check" || flag == "-c") {
    if (!ParseInt(v, 0, 1, &n)) bad("0 or 1");
    o->check = n == 1;
  } else {
    return false;
  }
  return true;
}

std::string LoopOptionsError(const LoopOptions& o) {
  Status s = coll::CheckReduceDtype(o.dtype, o.op);
  return s.ok() ? std::string()
                : "-t " + std::string(DataTypeName(o.dtype)) + " -o " +
                      std::string(ReduceOpName(o.op)) + ": " + s.message();
}

int WarmupCount(const LoopOptions& o, size_t bytes) {
  if (o.warmup == 0) return 0;
  constexpr int kMinWarmup = 16;  // the runtime's first algorithm decisions (header)
  return std::clamp(static_cast<int>((size_t{64} << 20) / std::max<size_t>(bytes, 1)),
                    std::min(o.warmup, kMinWarmup), o.warmup);
}

Status RunSizes(const Path& path, const LoopOptions& o, const std::vector<Ref>& refs,
                int64_t* wrong) {
  const int rank = path.rank, np = path.np;
  const size_t esize = DataTypeSize(o.dtype);
  const std::vector<size_t>& sizes = o.sizes;
  HVD_RETURN_IF_ERROR(coll::CheckReduceDtype(o.dtype, o.op));  // programs refuse it earlier
  if (sizes.empty()) return Status::OK();
  // 64-byte aligned, as PyTorch's CPU allocator aligns tensors: the alignment of a buffer
  // changes every program's speed (docs/performance.md), so all of them get the same kind.
  const size_t max_bytes = (*std::max_element(sizes.begin(), sizes.end()) + 63) / 64 * 64;
  std::unique_ptr<char, decltype(&std::free)> buf(
      static_cast<char*>(std::aligned_alloc(kBufferAlignment, max_bytes)), &std::free);
  if (buf == nullptr)
    return Internal("out of memory for a " + std::to_string(max_bytes) + " B buffer");
  const bool printer = rank == 0 && path.prints;
  if (printer) {
    std::printf("# %10s %11s %8s %7s %7s %11s %12s %12s %8s %13s %14s\n", "size(B)", "count",
                "type", "redop", "iters", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong",
                "memcpy(GB/s)", "reduce2t(GB/s)");
  }
  Status s;
  for (size_t k = 0; k < sizes.size() && s.ok(); ++k) {
    size_t count = sizes[k] / esize, bytes = count * esize;
    if (count == 0) continue;
    Fill(buf.get(), count, o, rank, np);
    for (int i = 0, n = WarmupCount(o, bytes); i < n && s.ok(); ++i) {
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
      const void* result = ResultAt(path, buf.get());
      size_wrong = s.ok() ? CountWrong(result, count, o, np) : 0;
      if (s.ok()) s = path.allreduce(&size_wrong, 1, DataType::kInt64, ReduceOp::kSum);
      if (s.ok()) size_wrong = ResultOf(path, &size_wrong);
    }
    if (!s.ok()) break;
    *wrong += size_wrong;
    if (printer) {
      const Ref ref = k < refs.size() ? refs[k] : Ref{};
      double per_op = seconds / iters;
      double algbw = bytes / per_op / 1e9;
      double busbw = algbw * 2.0 * (np - 1) / np;
      std::string wrong_text = o.check ? std::to_string(size_wrong) : "N/A";
      std::printf("  %10zu %11zu %8s %7s %7d %11.1f %12.3f %12.3f %8s %13.2f %14.2f\n", bytes,
                  count, std::string(DataTypeName(o.dtype)).c_str(),
                  std::string(ReduceOpName(o.op)).c_str(), iters, per_op * 1e6, algbw, busbw,
                  wrong_text.c_str(), ref.memcpy_gbs, ref.reduce_gbs);
      if (o.results) {
        std::printf(
            "RESULT impl=%s np=%d bytes=%zu iters=%d us=%.3f wrong=%s memcpy_gbs=%.3f "
            "reduce2t_gbs=%.3f\n",
            path.impl.c_str(), np, bytes, iters, per_op * 1e6,
            o.check ? std::to_string(size_wrong).c_str() : "-1", ref.memcpy_gbs, ref.reduce_gbs);
      }
      std::fflush(stdout);
    }
  }
  return s;
}

void PrintHeader(const LoopOptions& o, const std::string& what, int np) {
  std::printf("# %s, %d ranks\n", what.c_str(), np);
  std::printf("# machine: %s\n", MachineLine().c_str());
  std::printf(
      "# warmup %d (at most 64 MiB of warmup traffic, at least min(warmup, 16)), iters %s, check "
      "%s; busbw = algbw *"
      " 2(N-1)/N; time is the slowest rank's\n"
      "# memcpy, reduce2t: one process, same size (reduce2t: 2 threads of the float32 sum"
      " kernel, a[i] += b[i])\n",
      o.warmup, o.iters ? std::to_string(o.iters).c_str() : "auto (>= 0.3 s, <= 1000)",
      o.check ? "on" : "off");
}

}  // namespace hvd::bench
