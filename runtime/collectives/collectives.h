// Collective algorithms over a Transport. One algorithm per file; this header is the dispatcher's
// and the algorithms' shared contract.
//
// Vocabulary:
//   count     - number of elements (not bytes) of the reduced buffer.
//   segment   - the ring splits a buffer into `size` contiguous segments of whole elements (the
//               first count % size one element longer); after the reduce-scatter phase segment i
//               is fully reduced on rank (i - 1) mod size (see ring_allreduce.cc for the schedule).
//   chunk     - the unit in which received bytes are reduced while the rest is still in flight
//               (at most 512 KiB per send/recv call; see pipeline.h).
//   idle timeout - the longest time an algorithm may go without moving a byte before it fails with
//               an error naming the peer it was waiting on (a stopped or hung peer).
//
// All functions are collective: every rank of the transport calls them in the same order with
// compatible arguments. On error the transport may be left mid-stream; callers abort it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hvd/status.h"
#include "hvd/types.h"
#include "transport/transport.h"

namespace hvd::runtime::collectives {

struct Comm {
  transport::Transport* transport = nullptr;
  std::chrono::milliseconds idle_timeout{60000};
  int rank() const { return transport->rank(); }
  int size() const { return transport->size(); }
};

// In-place allreduce of `count` elements of `dtype` at `buf`. kAverage sums and then divides by
// size (integers round to nearest). Chooses the algorithm (ring for now) by size.
Status Allreduce(const Comm& comm, void* buf, size_t count, DataType dtype, ReduceOp op);

// Bandwidth-optimal ring: reduce-scatter then allgather, pipelined (ring_allreduce.cc).
// REQUIRES: op != kAverage.
Status RingAllreduce(const Comm& comm, void* buf, size_t count, DataType dtype, ReduceOp op);

// The ring's split of `count` elements into `parts` segments: parts + 1 element offsets, the first
// count % parts segments one element longer.
std::vector<size_t> RingSegments(size_t count, int parts);

// The ring with explicit segment boundaries (offsets.size() == size + 1, offsets.back() = count).
// Each element's reduction order depends only on the segment it lies in, so tensor fusion lays
// every tensor out piecewise by RingSegments(tensor count) and passes the summed boundaries: an
// element then travels the same path fused or not, and results are bit-identical either way.
// REQUIRES: op != kAverage.
Status RingAllreduceSegments(const Comm& comm, void* buf, const std::vector<size_t>& offsets,
                             DataType dtype, ReduceOp op);

// Concatenates every rank's `bytes[r]` bytes into `out` in rank order. `in` holds this rank's
// bytes[rank] bytes; `out` holds sum(bytes). `in` may alias out + offset of this rank. Any
// bytes[r] may be 0; every rank passes the same `bytes`.
Status Allgather(const Comm& comm, const void* in, void* out, const std::vector<size_t>& bytes);

// Copies `n` bytes at `buf` on `root` to `buf` on every rank. Binomial tree up to 64 KiB,
// pipelined chain above (broadcast.cc).
Status Broadcast(const Comm& comm, void* buf, size_t n, int root);

// Rank r sends send_bytes[p] bytes (consecutive in `in`, in peer order) to each peer p and receives
// recv_bytes[p] bytes from each (consecutive in `out`, in peer order). Sizes may be 0 and must
// agree pairwise (send_bytes[p] on r == recv_bytes[r] on p). `in` and `out` must not overlap.
Status Alltoall(const Comm& comm, const void* in, const std::vector<size_t>& send_bytes, void* out,
                const std::vector<size_t>& recv_bytes);

// Reduces `in` (sum(counts) elements, identical layout on every rank) across ranks and leaves
// elements [offset(rank), offset(rank) + counts[rank]) of the result in `out`.
// kAverage as in Allreduce. `in` is used as scratch and is clobbered.
Status Reducescatter(const Comm& comm, void* in, void* out, const std::vector<size_t>& counts,
                     DataType dtype, ReduceOp op);

// Returns once every rank has entered the barrier (dissemination, ceil(log2 size) rounds).
Status Barrier(const Comm& comm);

}  // namespace hvd::runtime::collectives
