// allreduce_bench: collectives::Allreduce over the TCP or the shared-memory transport, in the
// style of nccl-tests' all_reduce_perf. No negotiation, fusion or background thread: this is the
// ceiling the engine can reach, to be compared with memcpy and the reduction kernel on the same
// machine. With --api 1 the same loop runs through the public API instead (hvd::Init, then
// hvd::Allreduce: negotiation, response cache, fusion and the background thread included).
//
//   allreduce_bench -np 4 [-b 4K] [-e 256M] [-f 2] [--transport tcp|shm] [--direct-max B]
//                   [--chunk B] [--api 0|1] [--ref 0|1] [loop flags: allreduce_loop.h]
//
// --results 1 adds one machine-readable RESULT line per size (allreduce_loop.h).
//
// --process-set 0,1 (with --api 1) runs the loop on a process set of those ranks inside the
// -np job; the other ranks idle (--others idle) or run the same loop at the same time on a set of
// their own (--others busy). Compare with -np <set size> to see what the process set costs.
//
// Without HVD_SIZE in the environment it forks -np rank processes that meet through a file store
// in a fresh temp directory; with HVD_SIZE/HVD_RANK/HVD_RENDEZVOUS set (e.g. under hvdrun) it is
// one rank (the launcher is bench_util.h's). busbw = algbw * 2(N-1)/N is what a ring moves per
// link, so it is comparable across N.
// Exit status: 0 ok, 1 wrong results, 2 bad arguments, 3 a rank failed.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "allreduce_loop.h"
#include "bench_util.h"
#include "collectives/collectives.h"
#include "core/context.h"
#include "hvd/hvd.h"
#include "hvd/status.h"
#include "hvd/types.h"
#include "rendezvous/store.h"
#include "transport/connect.h"
#include "transport/move_off_cpu.h"

namespace hvd::bench {
namespace {

// The 64-byte aligned start of `v` (sized 63 bytes beyond what is used): the output aligned as
// the input buffers and hvd.torch's outputs are (malloc's large blocks start 16 bytes into a
// page; measured, that alone changed nothing at 16-64 MiB).
void* Aligned64(std::vector<char>& v) {
  const auto at = reinterpret_cast<uintptr_t>(v.data());
  return v.data() + ((64 - at % 64) % 64);
}

using runtime::collectives::Comm;
namespace coll = runtime::collectives;

// LoopOptions: sizes (filled from -b/-e/-f or --sizes), type, op, iters, warmup, check, results.
struct Options : LoopOptions {
  int np = 2;
  bool np_given = false;
  size_t min_bytes = 4 << 10, max_bytes = 256 << 20, factor = 2;
  std::string transport = "tcp";
  size_t direct_max = 0;  // 0: the runtime's default for the transport (core/comm_setup.cc)
  bool direct_given = false;
  size_t chunk = 256 << 10;
  size_t single_copy = 0;  // --single-copy B: the single-copy allreduce from B bytes (shm)
  bool single_copy_measure = false;  // --single-copy-measure 1: only where measured faster
  bool api = false;
  bool stats = false;  // --stats 1: each rank prints its engine's round counts (with --api 1)
  bool out_of_place = false;     // --out-of-place 1: hvd::Allreduce into a buffer of its own
  bool ref = true;               // measure the single-process memory references
  std::vector<int> process_set;  // --process-set: empty runs on the global set
  bool others_busy = false;      // --others busy: the complement runs the loop as a set too
};

[[noreturn]] void Usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "allreduce_bench: %s\n", error.c_str());
  std::fprintf(error.empty() ? stdout : stderr,
               "usage: allreduce_bench -np N [-b 4K] [-e 256M] [-f 2] [--transport tcp|shm]\n"
               "                       [--direct-max B] [--chunk B] [--api 0|1] [loop flags]\n"
               "  -np      ranks to fork (1..64); under HVD_SIZE it must match or be left out\n"
               "  -b, -e   smallest, largest buffer in bytes; suffix K, M or G (x1024)\n"
               "  -f       size multiplier between rows (integer >= 2)\n"
               "  --transport   tcp (127.0.0.1, default) or shm (shared memory)\n"
               "  --direct-max  latency path while (N-1) x size <= this (0: never); default: the\n"
               "                runtime's for the transport (64K shm, 256K tcp)\n"
               "  --chunk       the ring's chunk size (default 256K)\n"
               "  --single-copy B  with --transport shm: allreduces from B bytes read the peers'\n"
               "                memory (process_vm_readv) instead of taking the ring; default 0:\n"
               "                never (with --api 1: HVD_SINGLE_COPY_MIN_BYTES)\n"
               "  --single-copy-measure 1  only where measured faster than the ring (the\n"
               "                runtime's default, HVD_SINGLE_COPY_MEASURE); default 0: always\n"
               "  --ref 0       skip the memcpy/reduce2t references (printed as 0)\n"
               "  --api 1       through hvd::Init/hvd::Allreduce (the full runtime path); the\n"
               "                transport then follows HVD_SHM like any job's\n"
               "  --out-of-place 1  with --api 1: into an output buffer of its own (allocated\n"
               "                once, reused), as hvd.torch.allreduce; default: in place\n"
               "  --stats 1     with --api 1: each rank prints its engine's rounds (and how\n"
               "                many ran on the caller's thread) and its moves off a CPU\n"
               "                shared with a peer to stderr\n"
               "  --process-set R,R,...  with --api 1: run on a process set of these ranks\n"
               "  --others idle|busy     the ranks outside it idle (default) or run the same\n"
               "                         loop on a set of their own at the same time\n"
               "%s",
               kLoopFlagsUsage);
  std::exit(error.empty() ? 0 : kExitUsage);
}

// -b, -b*f, -b*f^2, ... up to -e.
std::vector<size_t> GeometricSizes(const Options& o) {
  std::vector<size_t> sizes;
  for (size_t b = o.min_bytes; b <= o.max_bytes; b *= o.factor) {
    sizes.push_back(b);
    if (b > o.max_bytes / o.factor) break;  // the next step would overflow or pass -e anyway
  }
  return sizes;
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  ParseFlagPairs(argc, argv, Usage,
                 [&](const std::string& flag, const char* v, const BadValue& bad) {
                   long long n;
                   if (ParseNpFlag(flag, v, bad, &o.np, &o.np_given)) {
                   } else if (flag == "-b" || flag == "--minbytes") {
                     if (!ParseBytes(v, &o.min_bytes)) bad("a size like 4096, 4K, 1M or 1G");
                   } else if (flag == "-e" || flag == "--maxbytes") {
                     if (!ParseBytes(v, &o.max_bytes)) bad("a size like 4096, 4K, 256M or 1G");
                   } else if (flag == "-f" || flag == "--stepfactor") {
                     if (!ParseInt(v, 2, 1024, &n)) bad("an integer factor >= 2, e.g. -f 2");
                     o.factor = static_cast<size_t>(n);
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
                   } else if (flag == "--single-copy") {
                     if (std::string(v) != "0" && !ParseBytes(v, &o.single_copy)) {
                       bad("a size like 0, 256K or 1M");
                     }
                   } else if (flag == "--single-copy-measure") {
                     if (!ParseInt(v, 0, 1, &n)) bad("0 or 1");
                     o.single_copy_measure = n == 1;
                   } else if (flag == "--ref") {
                     if (!ParseInt(v, 0, 1, &n)) bad("0 or 1");
                     o.ref = n == 1;
                   } else if (flag == "--api") {
                     if (!ParseInt(v, 0, 1, &n)) bad("0 or 1");
                     o.api = n == 1;
                   } else if (flag == "--out-of-place") {
                     if (!ParseInt(v, 0, 1, &n)) bad("0 or 1");
                     o.out_of_place = n == 1;
                   } else if (flag == "--stats") {
                     if (!ParseInt(v, 0, 1, &n)) bad("0 or 1");
                     o.stats = n == 1;
                   } else if (flag == "--process-set") {
                     o.process_set.clear();
                     std::string text = v;
                     size_t p = 0;
                     while (p <= text.size()) {
                       size_t q = text.find(',', p);
                       if (q == std::string::npos) q = text.size();
                       if (!ParseInt(text.substr(p, q - p).c_str(), 0, 63, &n)) {
                         bad("comma-separated ranks, e.g. 0,1");
                       }
                       o.process_set.push_back(static_cast<int>(n));
                       p = q + 1;
                     }
                   } else if (flag == "--others") {
                     if (std::string(v) != "idle" && std::string(v) != "busy") bad("idle or busy");
                     o.others_busy = std::string(v) == "busy";
                   } else {
                     return ParseLoopFlag(flag, v, bad, &o);
                   }
                   return true;
                 });
  if (o.min_bytes > o.max_bytes) Usage("-b: must not exceed -e");
  if (o.out_of_place && !o.api)
    Usage("--out-of-place needs --api 1 (the collective layer reduces in place)");
  if (!o.process_set.empty()) {
    if (!o.api) Usage("--process-set needs --api 1 (process sets are the runtime's)");
    std::vector<int> sorted = o.process_set;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
      if (sorted[i] >= o.np || (i > 0 && sorted[i] == sorted[i - 1])) {
        Usage("--process-set: distinct ranks below -np, e.g. -np 4 --process-set 0,1");
      }
    }
    if (o.others_busy && static_cast<int>(sorted.size()) * 2 != o.np) {
      Usage("--others busy needs a set of half the ranks (the others form the second set)");
    }
    o.process_set = sorted;
  }
  if (std::string e = LoopOptionsError(o); !e.empty()) Usage(e);
  if (o.sizes.empty()) o.sizes = GeometricSizes(o);
  return o;
}

// The collective layer over a transport of its own.
Status RunCollectives(const Options& o, const RankEnv& env, const std::vector<Ref>& refs,
                      int64_t* wrong) {
  const int rank = env.rank, np = env.size;
  std::unique_ptr<runtime::rendezvous::Store> base, scoped;
  HVD_RETURN_IF_ERROR(runtime::rendezvous::OpenStore(env.rendezvous, &base));
  runtime::rendezvous::Store* store = base.get();
  if (!env.scope.empty()) {  // under hvdrun: the job's secret grants only its attempt's keys
    scoped = runtime::rendezvous::NewPrefixStore(env.scope, base.get());
    store = scoped.get();
  }
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
  if (o.single_copy > 0) {
    std::string why_not;
    HVD_RETURN_IF_ERROR(
        coll::EnableSingleCopy(&comm, o.single_copy, o.single_copy_measure, &why_not));
    if (!why_not.empty()) return FailedPrecondition("--single-copy: " + why_not);
  }
  if (rank == 0) {
    PrintHeader(o,
                std::string("allreduce_bench: collectives::Allreduce over ") +
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
  InitOptions init;
  std::vector<int> others;
  for (int r = 0; r < env.size; ++r) {
    if (!std::binary_search(o.process_set.begin(), o.process_set.end(), r)) others.push_back(r);
  }
  if (!o.process_set.empty()) {
    init.process_sets.push_back(o.process_set);              // id 1
    if (o.others_busy) init.process_sets.push_back(others);  // id 2
  }
  HVD_RETURN_IF_ERROR(hvd::Init(init));
  int set = kGlobalProcessSet;
  if (ProcessSetIncluded(1)) set = 1;
  if (o.others_busy && ProcessSetIncluded(2)) set = 2;
  const bool runs = o.process_set.empty() || set != kGlobalProcessSet;
  const int set_rank = ProcessSetRank(set);
  if (runs && set_rank == 0 && (set != 2)) {
    std::string what =
        "allreduce_bench: hvd::Allreduce (negotiation, cache, fusion, background thread)";
    if (set != kGlobalProcessSet) {
      what += " on process set {";
      for (size_t i = 0; i < o.process_set.size(); ++i) {
        what += (i ? "," : "") + std::to_string(o.process_set[i]);
      }
      what += std::string("} of a ") + std::to_string(env.size) + "-rank job, other ranks " +
              (o.others_busy ? "running the same loop on their own set" : "idle");
    }
    PrintHeader(o, what, ProcessSetSize(set));
  }
  Status s;
  if (runs) {
    Path path;
    path.rank = set_rank;
    path.np = ProcessSetSize(set);
    path.impl = set == kGlobalProcessSet ? "hvd-api" : "hvd-api-set";
    // --out-of-place: one output buffer for every size, faulted in by the warmup and reused, as
    // a training loop's (or hvd.torch's pooled) outputs are.
    std::vector<char> out;
    if (o.out_of_place) {
      path.impl += "-oop";
      size_t most = 0;
      for (size_t b : o.sizes) most = std::max(most, b);
      out.resize(most + 64);
      path.result = [&out](const void*) { return static_cast<const void*>(Aligned64(out)); };
    }
    // One name per buffer size, type and op: every iteration after the first is a cache hit.
    // The name and the tensors are made once per buffer, as a training loop's live across its
    // steps (made in every call, they cost three allocations that are the benchmark's, not
    // hvd::Allreduce's).
    struct Call {
      void* buf = nullptr;
      size_t count = 0;
      DataType dtype = DataType::kFloat32;
      ReduceOp op = ReduceOp::kSum;
      std::string name;
      Tensor t, result;
      AllreduceOptions options;
    };
    auto call = std::make_shared<Call>();  // (`out` is sized above, once: its data() stays)
    path.allreduce = [set, &out, call](void* buf, size_t count, DataType dtype, ReduceOp op) {
      Call& c = *call;
      if (c.name.empty() || c.buf != buf || c.count != count || c.dtype != dtype || c.op != op) {
        c = Call{buf, count, dtype, op, {}, {}, {}, {}};
        c.name = "bench." + std::to_string(count) + "." + std::string(DataTypeName(dtype)) + "." +
                 std::string(ReduceOpName(op));
        c.t = MakeTensor(buf, dtype, static_cast<int64_t>(count));
        c.result =
            out.empty() ? c.t : MakeTensor(Aligned64(out), dtype, static_cast<int64_t>(count));
        c.options.op = op;
        c.options.process_set = set;
      }
      return hvd::Allreduce(c.name, c.t, c.result, c.options);
    };
    path.barrier = [set] { return hvd::Barrier(set); };
    // Only set 1's first rank prints (a busy second set measures the same thing, unprinted).
    path.prints = set != 2;
    const auto before = runtime::core::CurrentEngineStats();
    s = RunSizes(path, o, refs, wrong);
    const auto after = runtime::core::CurrentEngineStats();
    if (o.stats) {
      // Where the rounds ran: how many hand-offs to the background thread the loop paid for.
      std::fprintf(
          stderr,
          "# rank %d engine: %llu rounds (%llu on the caller's thread), %llu set cycles, "
          "%llu allreduces on data that came with the ready bits; %ld moves off a CPU shared "
          "with a peer since init\n",
          Rank(), static_cast<unsigned long long>(after.cycles - before.cycles),
          static_cast<unsigned long long>(after.caller_rounds - before.caller_rounds),
          static_cast<unsigned long long>(after.set_cycles - before.set_cycles),
          static_cast<unsigned long long>(after.eager_allreduces - before.eager_allreduces),
          runtime::transport::MovesOffCpu());
    }
  }
  // Ranks outside the set(s) wait here, idle, until the loop is over.
  if (s.ok()) s = hvd::Barrier();
  Status down = hvd::Shutdown();
  return s.ok() ? down : s;
}

// `env` says who this rank is and where the rendezvous store is (forked or under hvdrun).
int RunRank(const Options& o, const RankEnv& env, std::vector<Ref> refs) {
  const int rank = env.rank;
  signal(SIGPIPE, SIG_IGN);  // a dead peer must be an error status, not a silent exit
  if (rank == 0 && refs.empty() && o.ref) {
    // Launched externally: measure before meeting the others, while they idle in rendezvous.
    for (size_t bytes : o.sizes) refs.push_back(MeasureReference(bytes));
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
  if (o.ref) {
    for (size_t bytes : o.sizes) refs.push_back(MeasureReference(bytes));
  }
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
