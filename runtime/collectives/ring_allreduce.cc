// Ring allreduce: reduce-scatter, then allgather, as one pipelined stream per direction.
//
// Vocabulary (N ranks, this rank r, left = r-1, right = r+1, indices mod N):
//   segment i  - elements [off[i], off[i+1]) of the buffer (some may be empty when count < N).
//   chunk c    - every segment is cut into the same number C of chunks (SplitEvenly); C grows with
//                the largest segment so that a chunk is about Comm::ring_chunk_bytes.
//   S_j, R_j   - the j-th send step (to the right) and receive step (from the left) of a chunk,
//                j = 0 .. 2N-3:
//                  S_j = chunk of segment (r - j),   R_j = chunk of segment (r - 1 - j).
//                R_0 .. R_{N-2} are reduce steps (received into scratch, then buf op= scratch);
//                R_{N-1} .. R_{2N-3} are placed steps (the final values, written in place).
//                After R_{N-2} this rank holds the fully reduced chunk of segment (r + 1).
//   scale      - an average's 1/N (or any postscale) is applied at R_{N-2}, to each piece just
//                reduced and still in cache, so the allgather forwards final values and no pass
//                over the whole buffer follows.
//   schedule   - the streams run chunk by chunk: S_0(0) .. S_{2N-3}(0), S_0(1) .. . A chunk
//                reduced at R_j is forwarded at S_{j+1} right away, while it is still in this
//                rank's cache; one pass over the whole segment per step would evict it first.
//   look-ahead - L = Comm::ring_lookahead_chunks > 0 puts step j of chunk c at slot c + jL
//                (then by j): each gate has L slots of slack, so a rank goes on sending while
//                the peer's chunk crosses a slow link, instead of one chunk per one-way delay
//                (docs/performance-fusion.md, "Tensor fusion across delayed links"). Both streams
//                take the same order on every rank, and a chunk's own steps keep theirs, so the
//                argument below holds per chunk as before.
//   gate       - S_{j+1}(c) is the chunk R_j(c) just produced, so it may send its first k bytes
//                once k bytes of R_j(c) are processed: send, receive and reduce overlap, and each
//                rank sends 2(N-1)/N of the buffer in total (bandwidth-optimal).
//   extents    - the buffer may lie in several places (collectives.h, Extent): segments and
//                chunks are ranges of virtual elements, and a step that touches several extents
//                is one pipeline step per extent ("fragment"), gated fragment by fragment.
// Reduction order: segment i is reduced along the ring from rank i (collectives.h), whatever C
// and whatever the extents.
//
// Why bytes are never overwritten before they are sent (per chunk; chunks are disjoint):
//   - Reduce steps write segment (r-1-j) for j <= N-2. Its sends are S_{j+1} (gated on that very
//     write) and S_{j+1+N} (later still); S_{j+1-N} does not exist. Segment r = S_0 is never a
//     reduce target (that would need j = N-1). So a reduce never touches bytes already queued.
//   - Placed step R_{j+N} (j >= 0) overwrites segment (r-1-j), last sent as S_{j+1}. Byte b of
//     R_{j+N} reaches us only after byte b of our S_{j+1} went around the ring: each hop q's
//     S^q_{i+1} is gated on R^q_i, and all of them carry the same chunk, so byte b of R_{j+N}
//     exists only once our byte b of S_{j+1} was handed to the transport (TrySend copies). The
//     same chain covers R_{N-1} overwriting segment r = S_0. Only byte b lands at position b, so
//     no unsent byte is clobbered.
//
// Out of place (`in` given, RingAllreduce's input): S_0 sends segment r from the input, and each
// reduce step reads this rank's operand from the input as it reduces each piece into the output
// (RecvStep::local, ReduceTo), so the output is written once and the input never: no pass copying
// the input to the output. The input is only read, so the argument above needs nothing more:
// segment r of the output is first written by R_{N-1}.
//
// Streamed output (stream_copy.h): out of place, from comm.stream_min_bytes, the fragments with
// an input write with non-temporal stores what nothing reads back: R_j for j <= N-2 where a
// piece is forwarded from the outgoing copy as it is reduced (pipeline.h, RecvStep::stream), and
// the last placed step R_{2N-3}. The placed steps R_{N-1} .. R_{2N-4} are forwarded from the
// output, so they keep plain stores.
//
// Deadlock freedom: every rank always receives (the scratch ring drains as it reduces), so every
// send eventually completes; sends wait only on the left neighbour's data, and each send's gate
// comes before it in the streams' order of (chunk, step) pairs (the look-ahead's slot of
// S_{j-1}(c) is before S_j(c)'s; fragments only split a pair), so by induction over positions
// every gate is met.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/pipeline.h"
#include "collectives/stream_copy.h"

namespace hvd::runtime::collectives {
namespace {

// The position in both streams of step j (0-based among the run's `steps`) of chunk c, at
// index c * steps + j: by slot c + j x lookahead, then by j (see "look-ahead"); built slot by
// slot, in linear time. Empty for the plain order (no look-ahead, or a single chunk).
std::vector<int> Schedule(int chunks, int steps, int lookahead) {
  std::vector<int> at;
  if (lookahead <= 0 || chunks <= 1) return at;
  at.resize(static_cast<size_t>(chunks) * steps);
  int next = 0;
  const int64_t slots = chunks + int64_t{steps - 1} * lookahead;
  for (int64_t slot = 0; slot < slots; ++slot) {
    for (int j = 0; j < steps; ++j) {
      const int64_t c = slot - int64_t{j} * lookahead;
      if (c >= 0 && c < chunks) at[static_cast<size_t>(c) * steps + j] = next++;
    }
  }
  return at;
}

int Position(const std::vector<int>& at, int k) {
  return at.empty() ? k : at[static_cast<size_t>(k)];
}

// Steps [first, last) of the ring's 2N-2, for every chunk. Each step of a chunk is one pipeline
// step per extent it touches ("fragment"): a send step and the receive step it forwards cover
// the same virtual elements, so their fragments pair up one to one for the gates. The byte
// stream between two ranks is the virtual buffer's bytes in the streams' order whatever either
// rank's extents are, so ranks may lay the same virtual buffer out differently.
Status RunSteps(const Comm& comm, const std::vector<Extent>& extents,
                const std::vector<size_t>& off, DataType dtype, ReduceOp op, int first, int last,
                const char* algorithm, double scale = 1.0) {
  const int n = comm.size();
  const int r = comm.rank();
  if (off.size() != static_cast<size_t>(n) + 1) {
    return Internal(std::string(algorithm) + ": " + std::to_string(off.size()) +
                    " segment offsets for " + std::to_string(n) + " ranks");
  }
  const size_t total = off.back();
  if (total == 0) return Status::OK();
  if (extents.empty() || extents[0].begin != 0) {
    return Internal(std::string(algorithm) + ": the extents do not start at element 0");
  }
  const size_t es = DataTypeSize(dtype);
  if (n == 1) {  // the data is the result: out of place, it still goes to the output
    internal::ForEachFragment(extents, total, es, 0, total,
                              [](char* data, const char* in, size_t bytes) {
                                if (in != nullptr && in != data) std::memcpy(data, in, bytes);
                              });
    return Status::OK();
  }

  size_t max_bytes = 0;
  for (int i = 0; i < n; ++i) max_bytes = std::max(max_bytes, (off[i + 1] - off[i]) * es);
  const size_t chunk_bytes = std::max<size_t>(comm.ring_chunk_bytes, es);
  const int chunks =
      static_cast<int>(std::max<size_t>(1, (max_bytes + chunk_bytes - 1) / chunk_bytes));
  std::vector<std::vector<size_t>> cuts(n);
  for (int i = 0; i < n; ++i) cuts[i] = internal::SplitEvenly(off[i + 1] - off[i], chunks);
  // Virtual elements [*a, *b) of chunk c of segment i (mod n).
  auto piece = [&](int i, int c, size_t* a, size_t* b) {
    const size_t s = static_cast<size_t>(((i % n) + n) % n);
    *a = off[s] + cuts[s][c];
    *b = off[s] + cuts[s][c + 1];
  };

  internal::Pipeline plan;
  plan.algorithm = algorithm;
  plan.send_peer = (r + 1) % n;
  plan.recv_peer = (r - 1 + n) % n;
  plan.dtype = dtype;
  plan.op = op;
  const int steps = last - first;
  const size_t pairs = static_cast<size_t>(steps) * chunks;  // (chunk, step), index c*steps + j
  const std::vector<int> at = Schedule(chunks, steps, comm.ring_lookahead_chunks);
  // Out of place, the output's lines are in no cache (the steps read the input), so writing
  // them normally first reads each from memory; in place, a segment's lines were read for its
  // first send moments before they are reduced or placed, and streaming them measured slower.
  // So only fragments with an input stream, once the out-of-place extents and their inputs
  // are as large as comm.stream_min_bytes.
  size_t out_of_place = 0;  // bytes
  internal::ForEachFragment(extents, total, es, 0, total, [&](char*, const char* in, size_t bytes) {
    if (in != nullptr) out_of_place += bytes;
  });
  const bool stream_output = StreamsOutput(comm, out_of_place);
  std::vector<int> order(pairs);  // the pair at each position of both streams
  for (size_t k = 0; k < pairs; ++k) order[Position(at, static_cast<int>(k))] = static_cast<int>(k);
  std::vector<size_t> recv_first(pairs);  // each pair's first receive step in plan.recvs
  plan.sends.reserve(pairs);
  plan.recvs.reserve(pairs);
  for (const int k : order) {
    const int c = k / steps;
    const int j = first + k % steps;
    size_t a, b;
    piece(r - j, c, &a, &b);
    // The first step sends what this rank already holds (its input, or after a reduce-scatter
    // its reduced segment); every later one forwards the chunk just received, fragment by
    // fragment.
    size_t f = 0;
    internal::ForEachFragment(
        extents, total, es, a, b, [&](char* data, const char* in, size_t bytes) {
          const int gate = j == first ? -1 : static_cast<int>(recv_first[k - 1] + f++);
          plan.sends.push_back({in != nullptr && j == 0 ? in : data, bytes, gate});
        });
    recv_first[k] = plan.recvs.size();
    piece(r - 1 - j, c, &a, &b);
    // Written without reading the lines first (non-temporal) where nothing reads them again:
    // the last step's placed bytes, and reduced bytes where they are forwarded as they are made.
    const bool stream = stream_output && (j < n - 1 || j == 2 * n - 3);
    internal::ForEachFragment(extents, total, es, a, b,
                              [&](char* data, const char* in, size_t bytes) {
                                plan.recvs.push_back({data, bytes, /*reduce=*/j < n - 1,
                                                      /*scale=*/j == n - 2 ? scale : 1.0,
                                                      /*local=*/j < n - 1 ? in : nullptr,
                                                      /*stream=*/stream && in != nullptr});
                              });
  }
  return internal::RunPipeline(comm, plan);
}

// A buffer in one piece: one extent, its input out of place when `in` is another buffer.
std::vector<Extent> Whole(const void* in, void* buf) {
  return {Extent{0, static_cast<char*>(buf),
                 in != nullptr && in != buf ? static_cast<const char*>(in) : nullptr}};
}

}  // namespace

std::vector<size_t> RingSegments(size_t count, int parts) {
  return internal::SplitEvenly(count, parts);
}

Status RingAllreduce(const Comm& comm, const void* in, void* buf, const std::vector<size_t>& off,
                     DataType dtype, ReduceOp op, double scale) {
  return RingAllreduce(comm, Whole(in, buf), off, dtype, op, scale);
}

Status RingAllreduce(const Comm& comm, const std::vector<Extent>& extents,
                     const std::vector<size_t>& off, DataType dtype, ReduceOp op, double scale) {
  if (op == ReduceOp::kAverage) {
    return InvalidArgument("ring allreduce: kAverage must be a sum followed by Scale");
  }
  return RunSteps(comm, extents, off, dtype, op, 0, 2 * (comm.size() - 1), "ring allreduce", scale);
}

Status RingAllreduce(const Comm& comm, void* buf, const std::vector<size_t>& off, DataType dtype,
                     ReduceOp op, double scale) {
  return RingAllreduce(comm, nullptr, buf, off, dtype, op, scale);
}

Status RingReduceScatter(const Comm& comm, void* buf, const std::vector<size_t>& off,
                         DataType dtype, ReduceOp op) {
  return RingReduceScatter(comm, Whole(nullptr, buf), off, dtype, op);
}

Status RingReduceScatter(const Comm& comm, const std::vector<Extent>& extents,
                         const std::vector<size_t>& off, DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kAverage) {
    return InvalidArgument("ring reduce-scatter: kAverage must be a sum followed by Scale");
  }
  return RunSteps(comm, extents, off, dtype, op, 0, comm.size() - 1, "ring reduce-scatter");
}

Status RingAllgather(const Comm& comm, void* buf, const std::vector<size_t>& off, DataType dtype) {
  return RingAllgather(comm, Whole(nullptr, buf), off, dtype);
}

Status RingAllgather(const Comm& comm, const std::vector<Extent>& extents,
                     const std::vector<size_t>& off, DataType dtype) {
  const int n = comm.size();
  return RunSteps(comm, extents, off, dtype, ReduceOp::kSum, n - 1, 2 * (n - 1), "ring allgather");
}

}  // namespace hvd::runtime::collectives
