// The timed allreduce loop shared by every allreduce benchmark: hvd's own paths
// (allreduce_bench) and the peers' programs (bench/peers: Open MPI, Gloo), so that hvd and the
// libraries it is compared with are timed, checked and reported by the same code.
//
// Vocabulary:
//   path     - one way of running an allreduce on this rank (hvd's ring over shared memory, the
//              public API, MPI_Allreduce, gloo's ring-chunked allreduce...), with a barrier.
//   size     - a buffer in bytes; the loop runs every size of LoopOptions::sizes in turn.
//   iters    - timed operations per size: a probe loop grows until it lasts a tenth of
//              kTargetSeconds, then the count is extrapolated to last kTargetSeconds (at most
//              kMaxIters). Every count derives from times max-reduced over the ranks, so all
//              ranks agree on it without talking about it.
//   time     - the slowest rank's seconds for the timed loop, divided by iters.
//   algbw    - bytes / time; busbw = algbw x 2(N-1)/N, what a ring moves per link, comparable
//              across N (nccl-tests' definitions).
//   check    - after timing, the buffer is refilled with a pattern whose reduction is exact in
//              the type, reduced once more, and every element compared with the expected value.
//   RESULT   - with LoopOptions::results, one machine-readable line per size on rank 0:
//                RESULT impl=NAME np=N bytes=B iters=I us=T wrong=W memcpy_gbs=M reduce2t_gbs=R
//              (bench/peers/compare.py reads them; memcpy/reduce2t are 0 where not measured).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "hvd/status.h"
#include "hvd/types.h"

namespace hvd::bench {

constexpr double kTargetSeconds = 0.3;  // each timed loop lasts at least this long...
constexpr int kMaxIters = 1000;         // ...unless it would take more iterations than this

struct LoopOptions {
  std::vector<size_t> sizes;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int iters = 0;   // 0: calibrated per size (see `iters` above)
  int warmup = 5;  // untimed operations per size, fewer for large sizes: see WarmupCount
  bool check = true;
  bool results = false;
};

// Single-process memory references for a buffer size: memcpy bandwidth and a float32 `a += b`
// (the collectives' own kernel) split over two threads: a ceiling for algbw at that size.
struct Ref {
  double memcpy_gbs = 0, reduce_gbs = 0;
};
Ref MeasureReference(size_t bytes);

struct Path {
  int rank = 0, np = 1;
  std::string impl;  // RESULT's impl= name: hvd-shm, hvd-tcp, hvd-api, mpi-shm, gloo...
  std::function<Status(void* buf, size_t count, DataType dtype, ReduceOp op)> allreduce;
  std::function<Status()> barrier;
  bool prints = true;  // rank 0 prints the table (false: a second set timing the same thing)
  // Where the result of allreduce(buf, ...) is (unset: buf itself, in place): read after every
  // allreduce the loop runs, the check's and the slowest rank's time (which sets every rank's
  // iteration count) included.
  std::function<const void*(const void* buf)> result;
};

// The flags every allreduce benchmark takes, for LoopOptions:
//   --sizes 4K,64K,1M  -t float32  -o sum  --iters auto|N  --warmup N  --check 0|1  --results 0|1
// Returns false for a flag that is not one of them; calls bad(form) for a malformed value.
bool ParseLoopFlag(const std::string& flag, const char* value, const BadValue& bad, LoopOptions* o);
extern const char kLoopFlagsUsage[];

// After parsing: "" when -t and -o go together, else what is wrong with them and what to use
// instead (bool has no average), for the program's usage error.
std::string LoopOptionsError(const LoopOptions& o);

// Untimed operations before a size is timed: o.warmup, but at most 64 MiB of traffic (a large
// buffer's first operation already touches every page) and at least min(o.warmup, 16): through
// the API the runtime chooses its algorithm for a size after the 2nd, 4th, 8th and 16th
// operation of it, probing the other one before each, and a timed loop of a few large operations
// would otherwise time the probes. 0 when o.warmup is 0.
int WarmupCount(const LoopOptions& o, size_t bytes);

// Prints the table's header (rank 0 only calls it): what runs, the machine, the method.
void PrintHeader(const LoopOptions& o, const std::string& what, int np);

// Runs every size on every rank; rank 0 prints a row (and a RESULT line) per size. `refs` has
// one entry per size on rank 0 (others may pass none). *wrong accumulates mismatched elements.
// REQUIRES: every rank calls it with the same options; path.allreduce supports o.dtype and o.op,
// and float64 max and int64 sum (used to agree on times and to count wrong values).
Status RunSizes(const Path& path, const LoopOptions& o, const std::vector<Ref>& refs,
                int64_t* wrong);

}  // namespace hvd::bench
