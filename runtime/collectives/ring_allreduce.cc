// Ring allreduce: reduce-scatter, then allgather, as one pipelined stream per direction.
//
// Vocabulary (N ranks, this rank r, left = r-1, right = r+1, indices mod N):
//   segment i  - elements [off[i], off[i+1]) of the buffer; the buffer is split evenly on element
//                boundaries (SplitEvenly), so some segments are empty when count < N.
//   S_j, R_j   - the j-th send step (to the right) and receive step (from the left),
//                j = 0 .. 2N-3:
//                  S_j = segment (r - j),   R_j = segment (r - 1 - j).
//                R_0 .. R_{N-2} are reduce steps (received into scratch, then buf op= scratch);
//                R_{N-1} .. R_{2N-3} are placed steps (the final values, written in place).
//                After R_{N-2} this rank holds the fully reduced segment (r + 1).
//   gate       - S_{j+1} is the segment R_j just produced, so S_{j+1} may send its first k bytes
//                once k bytes of R_j are processed. A segment therefore streams around the ring
//                chunk by chunk: send, receive and reduce of consecutive chunks overlap, and each
//                rank sends 2(N-1)/N of the buffer in total (bandwidth-optimal).
//
// Why bytes are never overwritten before they are sent:
//   - Reduce steps write segment (r-1-j) for j <= N-2. Its sends are S_{j+1} (gated on that very
//     write) and S_{j+1+N} (later still); S_{j+1-N} does not exist. Segment r = S_0 is never a
//     reduce target (that would need j = N-1). So a reduce never touches bytes already queued.
//   - Placed step R_{j+N} (j >= 0) overwrites segment (r-1-j), last sent as S_{j+1}. Byte b of
//     R_{j+N} reaches us only after byte b of our S_{j+1} went around the ring: each hop q's
//     S^q_{i+1} is gated on R^q_i, and all of them carry the same segment, so byte b of R_{j+N}
//     exists only once our byte b of S_{j+1} was handed to the transport (TrySend copies). The
//     same chain covers R_{N-1} overwriting segment r = S_0. Only byte b lands at position b, so
//     no unsent byte is clobbered.
//
// Deadlock freedom: every rank always receives (the scratch ring drains as it reduces), so every
// send eventually completes; sends wait only on the left neighbour's data.
#include "collectives/collectives.h"
#include "collectives/pipeline.h"

namespace hvd::runtime::collectives {

Status RingAllreduce(const Comm& comm, void* buf, size_t count, DataType dtype, ReduceOp op) {
  return RingAllreduceSegments(comm, buf, RingSegments(count, comm.size()), dtype, op);
}

std::vector<size_t> RingSegments(size_t count, int parts) {
  return internal::SplitEvenly(count, parts);
}

Status RingAllreduceSegments(const Comm& comm, void* buf, const std::vector<size_t>& off,
                             DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kAverage) {
    return InvalidArgument("ring allreduce: kAverage must be a sum followed by Scale");
  }
  const int n = comm.size();
  const int r = comm.rank();
  if (off.size() != static_cast<size_t>(n) + 1) {
    return Internal("ring allreduce: " + std::to_string(off.size()) + " segment offsets for " +
                    std::to_string(n) + " ranks");
  }
  if (n == 1 || off.back() == 0) return Status::OK();

  const size_t es = DataTypeSize(dtype);
  char* base = static_cast<char*>(buf);
  auto segment = [&](int i, char** data, size_t* bytes) {
    const size_t s = static_cast<size_t>(((i % n) + n) % n);
    *data = base + off[s] * es;
    *bytes = (off[s + 1] - off[s]) * es;
  };

  internal::Pipeline plan;
  plan.algorithm = "ring allreduce";
  plan.send_peer = (r + 1) % n;
  plan.recv_peer = (r - 1 + n) % n;
  plan.dtype = dtype;
  plan.op = op;
  const int steps = 2 * (n - 1);
  plan.sends.resize(steps);
  plan.recvs.resize(steps);
  for (int j = 0; j < steps; ++j) {
    char* data;
    size_t bytes;
    segment(r - j, &data, &bytes);
    plan.sends[j] = {data, bytes, j - 1};  // S_0 has gate -1: it is this rank's own input
    segment(r - 1 - j, &data, &bytes);
    plan.recvs[j] = {data, bytes, /*reduce=*/j < n - 1};
  }
  return internal::RunPipeline(comm, plan);
}

}  // namespace hvd::runtime::collectives
