// The streaming engine shared by the ring and chain algorithms (ring allreduce, reducescatter,
// allgather, pipelined broadcast). Internal to collectives/.
//
// Vocabulary:
//   send stream  - the sequence of send steps S_0, S_1, ... this rank writes to one peer, in order.
//   recv stream  - the sequence of receive steps R_0, R_1, ... it reads from one peer, in order.
//   placed step  - a receive step whose bytes land directly at their destination.
//   reduce step  - a receive step whose bytes land in a private scratch ring and are reduced into
//                  the destination (dst op= received; out of place dst = local op received) as
//                  soon as whole elements have arrived.
//   processed    - for a placed step, the bytes received; for a reduce step, the bytes reduced.
//   gate         - a send step may name a receive step: it may only send its first k bytes once
//                  k bytes of that receive step are processed. This is what pipelines a ring: the
//                  segment received (and reduced) at step j is forwarded at step j+1 while its
//                  tail is still arriving.
//
// Both streams are driven from one loop with non-blocking TrySend/TryRecv; each call moves at most
// kMaxIoBytes so reductions interleave with I/O, and the loop sleeps in Transport::WaitReady only
// when neither direction can move. Going comm.idle_timeout without moving a byte is an error that
// names the peer(s) waited on.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "hvd/status.h"
#include "hvd/types.h"

namespace hvd::runtime::collectives::internal {

// Largest single TrySend/TryRecv: small enough that reducing one chunk stays in L2 and the other
// direction is serviced often, large enough to amortize syscalls.
inline constexpr size_t kMaxIoBytes = 512 << 10;

struct SendStep {
  const char* data = nullptr;
  size_t bytes = 0;
  int gate = -1;  // index of the receive step whose processed prefix bounds this step; -1: none
};

struct RecvStep {
  char* dst = nullptr;
  size_t bytes = 0;  // a multiple of the element size for reduce steps
  bool reduce = false;
  double scale = 1.0;  // reduce steps: each reduced piece is then multiplied by this (Scale)
  // Reduce steps, out of place: this rank's operand is read from here (the caller's input) as
  // each piece is reduced into dst (ReduceTo: block by block in cache, no pass copying the
  // input into the output). Null: dst holds it.
  const char* local = nullptr;
  // Nothing reads these bytes of dst again during the operation (a placed step that is not
  // forwarded; a reduce step whose pieces are forwarded as they are reduced): with a zero-copy
  // link they are written with non-temporal stores (stream_copy.h), which spares memory the
  // read of each line before it is written. On a reduce step it takes effect only for the
  // pieces written to the outgoing copy as well (the others are read back by the send).
  bool stream = false;
};

struct Pipeline {
  const char* algorithm = "";  // "ring allreduce": the first word of every error
  int send_peer = -1;          // -1: no send stream
  int recv_peer = -1;          // -1: no receive stream
  std::vector<SendStep> sends;
  std::vector<RecvStep> recvs;
  DataType dtype = DataType::kUInt8;  // for reduce steps
  ReduceOp op = ReduceOp::kSum;       // for reduce steps; never kAverage
};

// Runs both streams to completion. Errors read "<algorithm> step k/n: recv from <link>: ...".
// REQUIRES: a gate names a receive step that comes before its send step in the plan's own order
// of both streams (the ring's pairs of steps; the indices of the two streams may differ) and the
// gated send step is no longer than that receive step; the plan is deadlock-free across ranks
// (every rank always receives, so every send eventually drains).
Status RunPipeline(const Comm& comm, const Pipeline& plan);

// Per-thread scratch areas, kept between calls so a training loop does not fault in fresh pages
// for every collective. kPipeline: RunPipeline's receive ring (at most 1 MiB); kGather: the
// direct allreduce's copies of the peers' buffers, one slot per rank (at most N x its size
// limit); kSingleCopy: the single-copy allreduce's two pieces; kRider: the peers' data that rode
// with the ready bits (negotiation/exchange.h, at most N x 64 KiB).
enum class Scratch { kPipeline = 0, kGather = 1, kSingleCopy = 2, kRider = 3 };
char* ThreadScratch(Scratch which, size_t bytes);

// Splits `count` elements into `parts` contiguous segments of whole elements, the first
// count % parts one element longer. Returns parts + 1 element offsets.
std::vector<size_t> SplitEvenly(size_t count, int parts);
void SplitEvenly(size_t count, int parts, std::vector<size_t>* off);  // into `off`'s memory

// Calls fn(data, in, bytes) for each run of the virtual elements [a, b) that lies in one extent,
// in order (none for an empty range; runs of 0 bytes are skipped). `x`: a buffer of `total`
// elements of `es` bytes in extents (collectives.h, Extent); the ring's steps and the
// hierarchical allreduce's slices are made of these runs.
template <typename Fn>
void ForEachFragment(const std::vector<Extent>& x, size_t total, size_t es, size_t a, size_t b,
                     Fn&& fn) {
  if (a >= b) return;
  // The last extent that begins at or before a.
  size_t k =
      static_cast<size_t>(std::upper_bound(x.begin(), x.end(), a,
                                           [](size_t v, const Extent& e) { return v < e.begin; }) -
                          x.begin() - 1);
  for (; a < b; ++k) {
    const size_t end = std::min(b, k + 1 < x.size() ? x[k + 1].begin : total);
    if (end <= a) continue;
    const size_t skip = (a - x[k].begin) * es;
    fn(x[k].data + skip, x[k].in != nullptr ? x[k].in + skip : nullptr, (end - a) * es);
    a = end;
  }
}

// "rank 2 (127.0.0.1:40113)" for error messages; just "rank 2" when `error` (if given) already
// names the link, so context does not repeat the address.
std::string PeerName(const Comm& comm, int peer, const Status* error = nullptr);

}  // namespace hvd::runtime::collectives::internal
