// Collective algorithms over a Transport. One algorithm per file; this header is the dispatcher's
// and the algorithms' shared contract.
//
// Vocabulary:
//   count     - number of elements (not bytes) of the reduced buffer.
//   part      - allreduce splits a buffer into contiguous parts of whole elements (the first
//               count % parts one element longer); a part fixes the order in which its elements
//               are reduced (see "Allreduce" below). The ring's segments are its parts.
//   chunk     - the ring moves each segment in chunks (Comm::ring_chunk_bytes) chunk by chunk;
//               within a step, received bytes are reduced while the rest is in flight (pipeline.h).
//   idle timeout - the longest time an algorithm may go without moving a byte before it fails with
//               an error naming the peer it was waiting on (a stopped or hung peer).
//
// All functions are collective: every rank of the transport calls them in the same order with
// compatible arguments. On error the transport may be left mid-stream; callers abort it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hvd/status.h"
#include "hvd/types.h"
#include "transport/transport.h"

namespace hvd::runtime::collectives {

class SingleCopyChoice;

// The groups the hierarchical allreduce runs over (hierarchical_allreduce.cc): views of the
// job's transport (transport/group.h).
struct Hierarchy {
  std::unique_ptr<transport::Transport> local;  // the ranks on this host, in rank order
  std::unique_ptr<transport::Transport> cross;  // this local rank's rank on every host
  size_t local_direct_max_bytes = 0;            // Comm::direct_max_bytes within the host...
  size_t cross_direct_max_bytes = 0;            // ...and across hosts
  size_t local_ring_chunk_bytes = 0;            // Comm::ring_chunk_bytes within the host and
  size_t cross_ring_chunk_bytes = 0;            // across hosts; 0: the job's communicator's
  int cross_ring_lookahead_chunks = 0;          // Comm::ring_lookahead_chunks across hosts
};

// Every rank's input of one allreduce, received already (the negotiation carried it with the
// ready bits: core/set_runner.cc): rank q's `bytes` at base + stride x q, this rank's slot
// unused. The direct allreduce reduces these copies (and may overwrite them).
struct Gathered {
  char* base = nullptr;
  size_t stride = 0;
  size_t bytes = 0;
};

struct Comm {
  transport::Transport* transport = nullptr;
  std::chrono::milliseconds idle_timeout{60000};
  // The ring runs each segment in chunks of about this many bytes, chunk by chunk, so the bytes a
  // rank reduces are forwarded while they are still in its cache.
  size_t ring_chunk_bytes = 256 << 10;
  int ring_lookahead_chunks = 0;  // ring_allreduce.cc, "look-ahead"; the same on every rank
  // An allreduce takes the direct (latency) path (direct_allreduce.cc) when each rank would send
  // at most this many bytes on it: (size - 1) x the buffer.
  size_t direct_max_bytes = 0;
  // Allreduces of at least this many bytes may read the peers' buffers through the kernel
  // (single_copy_allreduce.cc) instead of taking the ring; 0: never. Only EnableSingleCopy sets
  // it, once every rank of the communicator has been seen to read every other's memory.
  size_t single_copy_min_bytes = 0;
  // Set: the ring or the single copy, whichever is measured faster for the size
  // (single_copy_choice.h); null: the single copy always from single_copy_min_bytes. Per
  // communicator: Over() gives a view a fresh one.
  std::shared_ptr<SingleCopyChoice> single_copy_choice;
  // Out-of-place allreduces whose input and output add up to at least this many bytes write the
  // output with non-temporal stores where the operation does not read it again (stream_copy.h);
  // 0: never. A rank's own choice: it changes no byte that another rank sees.
  size_t stream_min_bytes = 0;
  // Set when the job spans hosts with the same number of ranks on each: allreduces then run
  // hierarchically. Null: flat algorithms over `transport`.
  std::shared_ptr<const Hierarchy> hierarchy;
  // Set for one operation whose inputs arrived already: its direct allreduce exchanges nothing.
  // REQUIRES: that operation takes the direct path with exactly `gathered->bytes`.
  const Gathered* gathered = nullptr;

  // A process set's communicator: the job rank of each of its ranks, for messages (users know
  // ranks by their job rank). Null: this communicator's ranks are the job's.
  std::shared_ptr<const std::vector<int>> job_ranks;

  int rank() const { return transport->rank(); }
  int size() const { return transport->size(); }
  // The job rank of this communicator's rank `r`.
  int JobRank(int r) const { return job_ranks != nullptr ? (*job_ranks)[r] : r; }
  // This communicator over another transport (a group view), without the hierarchy.
  Comm Over(transport::Transport* t) const;
  // This communicator over the hierarchy's local or cross group, with the group's own
  // direct-path size, ring chunk and look-ahead. REQUIRES: hierarchy != nullptr.
  Comm OverLocal() const;
  Comm OverCross() const;
};

// The hierarchy for a job whose ranks run on `hosts` (indexed by rank), or null when they share
// one host or the hosts hold different numbers of ranks. `t` must outlive the result.
std::shared_ptr<Hierarchy> MakeHierarchy(transport::Transport* t,
                                         const std::vector<std::string>& hosts,
                                         size_t local_direct_max_bytes,
                                         size_t cross_direct_max_bytes);

// ---- Allreduce ----
//
// Every algorithm below reduces an element in the same order, fixed by the "part" of the buffer
// it lies in, so the result never depends on which algorithm ran, how the ring was chunked, or
// what else was fused into the buffer:
//   flat (one host, or unequal hosts): the buffer has size() parts; part i is reduced along the
//     ring starting at rank i: ((x_i op x_{i+1}) op x_{i+2}) ... op x_{i-1} (left to right with
//     the newly added rank's value as the first operand, as the ring computes it).
//   hierarchical: local_size x hosts parts; local segment t (parts t*H .. t*H+H-1) is reduced over
//     the host's ranks in ring order from local rank t, then part t*H+u over the hosts in ring
//     order from host u.

// The part boundaries of a `count`-element allreduce on `comm`: parts + 1 element offsets.
// Tensor fusion lays each tensor out part by part and passes the summed boundaries, so an element
// is reduced the same way fused or not.
std::vector<size_t> AllreduceLayout(const Comm& comm, size_t count);
// The same into `parts`, reusing its memory (a caller that keeps it allocates nothing).
void AllreduceLayout(const Comm& comm, size_t count, std::vector<size_t>* parts);

// In-place allreduce of `count` elements of `dtype` at `buf`. kAverage sums and then divides by
// size (integers round to nearest). Chooses the algorithm by size and placement (allreduce.cc).
Status Allreduce(const Comm& comm, void* buf, size_t count, DataType dtype, ReduceOp op);

// The same with explicit part boundaries: `parts` as AllreduceLayout returns them, or summed
// over the tensors of a fused buffer; and the result multiplied by `postscale` (Scale's rounding,
// once per element, on top of kAverage's division). The ring applies the factor to each chunk
// as it completes, while it is in cache, instead of in a pass over the whole buffer afterwards.
Status AllreduceParts(const Comm& comm, void* buf, const std::vector<size_t>& parts, DataType dtype,
                      ReduceOp op, double postscale = 1.0);
// Out of place: the result of reducing `in` (parts.back() elements, only read) in `buf`, which
// must not overlap it; the same result as copying `in` to `buf` and reducing there. The ring,
// the single copy and the direct path read `in` where it is (ReduceTo: no pass copying it); the
// hierarchical path copies it first.
Status AllreduceParts(const Comm& comm, const void* in, void* buf, const std::vector<size_t>& parts,
                      DataType dtype, ReduceOp op, double postscale = 1.0);

// Whether `bytes` go through the direct path on `comm` (see Comm::direct_max_bytes).
bool UseDirect(const Comm& comm, size_t bytes);

// ---- Allreduce of a buffer in pieces ----
//
// One allreduce over memory in several places: the buffer the algorithms see (its parts, its
// element order) is virtual, and extent k of it, elements [begin_k, begin_{k+1}) (the last one up
// to parts.back()), lies at `data`, its input at `in` when out of place (only read; null: in
// place). Tensor fusion uses it to reduce large tensors where they are and the small ones packed
// in the fusion buffer in one collective, without copying the large ones
// (core/executor_in_place.cc).
struct Extent {
  size_t begin = 0;  // the first element's index in the virtual buffer
  char* data = nullptr;
  const char* in = nullptr;
};

// Whether AllreduceExtents runs for `count` elements of `dtype` on `comm`: where AllreduceParts
// would run rings (more than one rank; flat: neither the direct path nor the single copy;
// hierarchical: its large buffers' path, the rings within the host). The same on every rank.
bool ExtentsTake(const Comm& comm, size_t count, DataType dtype);

// AllreduceParts over `extents` (increasing `begin`, the first 0; extents of no elements are
// allowed): every element ends as AllreduceParts would leave it at that virtual index, bit for
// bit. REQUIRES: ExtentsTake(comm, parts.back(), dtype); FailedPrecondition otherwise. No
// extent's `in` may overlap any extent's `data`.
Status AllreduceExtents(const Comm& comm, const std::vector<Extent>& extents,
                        const std::vector<size_t>& parts, DataType dtype, ReduceOp op,
                        double postscale = 1.0);

// The algorithm AllreduceParts runs for `bytes`: "ring", "direct", "hierarchical" or
// "single-copy".
const char* AllreduceAlgorithm(const Comm& comm, size_t bytes);

// The algorithms (REQUIRES: op != kAverage; `off` has size() + 1 entries, off.back() = count).
// Bandwidth-optimal ring: reduce-scatter then allgather, pipelined and chunked (ring_allreduce.cc).
// Each result element is multiplied by `scale` (Scale's rounding) before it is forwarded.
Status RingAllreduce(const Comm& comm, void* buf, const std::vector<size_t>& off, DataType dtype,
                     ReduceOp op, double scale = 1.0);
// Out of place: reduces `in` into `buf` (see AllreduceParts); null `in` (or `in` == `buf`): in
// place.
Status RingAllreduce(const Comm& comm, const void* in, void* buf, const std::vector<size_t>& off,
                     DataType dtype, ReduceOp op, double scale = 1.0);
// Over extents (see AllreduceExtents; `off` has size() + 1 entries).
Status RingAllreduce(const Comm& comm, const std::vector<Extent>& extents,
                     const std::vector<size_t>& off, DataType dtype, ReduceOp op,
                     double scale = 1.0);
// Single copy, among ranks of one host whose memory this process may read (process_vm_readv):
// the owner of each part reads it from every rank's source and reduces it in the ring's order,
// then every rank reads the other parts from their owners (single_copy_allreduce.cc). `in` as
// RingAllreduce's; the result multiplied by `scale`. FailedPrecondition when a peer is not on a
// shared-memory link. Where a rank's memory cannot be read by its peers every rank runs the ring
// instead, and *ran_ring (if given) says so.
Status SingleCopyAllreduce(const Comm& comm, const void* in, void* buf,
                           const std::vector<size_t>& off, DataType dtype, ReduceOp op,
                           double scale = 1.0, bool* ran_ring = nullptr);
// Collective: sets comm->single_copy_min_bytes to `min_bytes` when every rank of the flat
// communicator can read every other's memory, else leaves it 0 with *why_not saying which rank
// could not and why (the same choice on every rank). `measure`: choose between the ring and the
// single copy by their times (Comm::single_copy_choice). Errors only when the exchange fails.
Status EnableSingleCopy(Comm* comm, size_t min_bytes, bool measure, std::string* why_not);
// Ring phases alone: after the reduce-scatter, part i is reduced on rank (i - 1) mod size; the
// allgather starts from that state.
Status RingReduceScatter(const Comm& comm, void* buf, const std::vector<size_t>& off,
                         DataType dtype, ReduceOp op);
Status RingAllgather(const Comm& comm, void* buf, const std::vector<size_t>& off, DataType dtype);
// The same over extents (the reduce-scatter reads an extent's `in` as RingAllreduce does).
Status RingReduceScatter(const Comm& comm, const std::vector<Extent>& extents,
                         const std::vector<size_t>& off, DataType dtype, ReduceOp op);
Status RingAllgather(const Comm& comm, const std::vector<Extent>& extents,
                     const std::vector<size_t>& off, DataType dtype);
// Latency path: every rank sends its buffer (its input, out of place) to every other and reduces
// locally (direct_allreduce.cc). `off` may have any number of parts; part i is reduced in ring
// order from rank i mod size().
Status DirectAllreduce(const Comm& comm, void* buf, const std::vector<size_t>& off, DataType dtype,
                       ReduceOp op);
// Out of place: reduces `in` into `buf`, `in` untouched (null `in`, or `in` == `buf`: in place).
Status DirectAllreduce(const Comm& comm, const void* in, void* buf, const std::vector<size_t>& off,
                       DataType dtype, ReduceOp op);
// Reduce within the host, ring across hosts, allgather within the host
// (hierarchical_allreduce.cc). REQUIRES: comm.hierarchy.
Status HierarchicalAllreduce(const Comm& comm, void* buf, const std::vector<size_t>& off,
                             DataType dtype, ReduceOp op);
// Its rings alone, over extents, each result element multiplied by `scale` in the cross ring.
// REQUIRES: ExtentsTake(comm, off.back(), dtype).
Status HierarchicalAllreduce(const Comm& comm, const std::vector<Extent>& extents,
                             const std::vector<size_t>& off, DataType dtype, ReduceOp op,
                             double scale);

// Splits `count` elements into `parts` contiguous pieces of whole elements, the first
// count % parts one element longer. Returns parts + 1 element offsets.
std::vector<size_t> RingSegments(size_t count, int parts);

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

// ---- Adasum ----
//
// In-place Adasum (adaptive summation, Horovod's hvd.Adasum) of the tensors at `buf`, back to back,
// tensor_counts[t] elements each (any may be 0): each tensor is combined across ranks with the
// pairwise operator adasum(a, b) = (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b (a coefficient
// is 1 where its norm is below 1e-8), along a fixed binary tree over the ranks, with its own
// dot products and norms. Every rank ends with the same bytes. Any number of ranks: the ranks
// above the largest power of two are first folded into the ranks below it (adasum.cc defines the
// tree exactly). float32, float64, float16 and bfloat16 (half types computed in float32, dot
// products in double); any other dtype is InvalidArgument. One rank: a no-op.
Status AdasumAllreduce(const Comm& comm, void* buf, const std::vector<size_t>& tensor_counts,
                       DataType dtype);

}  // namespace hvd::runtime::collectives
