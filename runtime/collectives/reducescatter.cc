// Reducescatter with arbitrary per-rank counts: the reduce-scatter half of the ring allreduce,
// rotated so that rank r ends up with its own segment r.
//
// Vocabulary (N ranks, this rank r, left = r-1, right = r+1, indices mod N):
//   segment i  - elements [off[i], off[i] + counts[i]) of `in`; any count, including 0.
//   S_j, R_j   - send step to the right and reduce step from the left, j = 0 .. N-2:
//                  S_j = segment (r - 1 - j),   R_j = segment (r - 2 - j).
//                R_j is received into scratch and reduced into `in`; R_{N-2} = segment r, so
//                after the last step segment r of `in` holds the reduction over all ranks.
//   gate       - S_{j+1} forwards the partial sum R_j is producing, chunk by chunk, as in
//                ring_allreduce.cc. Each rank sends every segment but its own once
//                (sum(counts) - counts[r] elements): bandwidth-optimal.
// Safety: R_0 .. R_{N-2} target N-1 distinct segments, each written once and before it is sent
// (S_{j+1} is gated on R_j); S_0 = segment r-1 is never a reduce target. So no byte is
// overwritten before it is sent.
#include <cstring>
#include <string>

#include "collectives/collectives.h"
#include "collectives/pipeline.h"
#include "collectives/reduce.h"

namespace hvd::runtime::collectives {

Status Reducescatter(const Comm& comm, void* in, void* out, const std::vector<size_t>& counts,
                     DataType dtype, ReduceOp op) {
  if (comm.transport == nullptr) return InvalidArgument("reducescatter: no transport");
  if (!IsValid(dtype) || !IsValid(op)) {
    return InvalidArgument("reducescatter: invalid dtype or reduce op");
  }
  const int n = comm.size();
  const int r = comm.rank();
  if (counts.size() != static_cast<size_t>(n)) {
    return InvalidArgument("reducescatter: " + std::to_string(counts.size()) + " counts for " +
                           std::to_string(n) + " ranks");
  }
  const size_t es = DataTypeSize(dtype);
  std::vector<size_t> off(n + 1, 0);
  for (int i = 0; i < n; ++i) off[i + 1] = off[i] + counts[i];
  if (off[n] == 0) return Status::OK();
  if (in == nullptr || (counts[r] > 0 && out == nullptr)) {
    return InvalidArgument("reducescatter: null buffer");
  }
  char* base = static_cast<char*>(in);

  if (n > 1) {
    internal::Pipeline plan;
    plan.algorithm = "ring reducescatter";
    plan.send_peer = (r + 1) % n;
    plan.recv_peer = (r - 1 + n) % n;
    plan.dtype = dtype;
    plan.op = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
    auto seg = [&](int i) { return static_cast<size_t>(((i % n) + n) % n); };
    for (int j = 0; j < n - 1; ++j) {
      const size_t s = seg(r - 1 - j);
      const size_t d = seg(r - 2 - j);
      plan.sends.push_back({base + off[s] * es, counts[s] * es, j - 1});
      plan.recvs.push_back({base + off[d] * es, counts[d] * es, /*reduce=*/true});
    }
    HVD_RETURN_IF_ERROR(internal::RunPipeline(comm, plan));
  }
  if (counts[r] > 0) {
    std::memmove(out, base + off[r] * es, counts[r] * es);
    if (op == ReduceOp::kAverage) Scale(out, counts[r], dtype, 1.0 / n);
    // One rank reduces nothing: bool still owes its 0/1 results (Scale by 1 normalizes them).
    if (n == 1 && dtype == DataType::kBool) Scale(out, counts[r], dtype, 1.0);
  }
  return Status::OK();
}

}  // namespace hvd::runtime::collectives
