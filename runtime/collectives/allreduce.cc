// Allreduce dispatcher: validates arguments, runs the ring (the only algorithm for now), and turns
// kAverage into a sum followed by Scale(1/size).
//
// Vocabulary: see collectives.h. Special cases: count 0 is a no-op on every rank; with one rank
// the data is already the result and only kAverage's scaling (by 1, exact) runs.
#include <string>

#include "collectives/collectives.h"
#include "collectives/reduce.h"

namespace hvd::runtime::collectives {

Status Allreduce(const Comm& comm, void* buf, size_t count, DataType dtype, ReduceOp op) {
  if (comm.transport == nullptr) return InvalidArgument("allreduce: no transport");
  if (!IsValid(dtype)) {
    return InvalidArgument("allreduce: invalid dtype " + std::to_string(static_cast<int>(dtype)));
  }
  if (!IsValid(op)) {
    return InvalidArgument("allreduce: invalid reduce op " + std::to_string(static_cast<int>(op)));
  }
  if (count == 0) return Status::OK();
  if (buf == nullptr) return InvalidArgument("allreduce: null buffer for a non-empty tensor");

  const ReduceOp ring_op = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
  HVD_RETURN_IF_ERROR(RingAllreduce(comm, buf, count, dtype, ring_op));
  if (op == ReduceOp::kAverage) Scale(buf, count, dtype, 1.0 / comm.size());
  return Status::OK();
}

}  // namespace hvd::runtime::collectives
