// The argument checks of the public API (core/api.cc, core/api_sets.cc): what every rank would
// reject alike, checked before anything is submitted, with messages that name the argument.
#pragma once

#include "core/operation.h"
#include "hvd/hvd.h"

namespace hvd::internal {

// A valid dtype, no negative dimension, data unless empty, a device this process can use (the GPU
// backend loaded, the ordinal visible); `what` names the argument ("input", "output").
Status CheckTensor(const char* what, const Tensor& t);
// Input and output: each valid, same dtype and element count.
Status CheckPair(const Tensor& in, const Tensor& out);
Status CheckReduce(const AllreduceOptions& o);
// The op for this tensor's dtype (collectives::CheckReduceDtype); Adasum on floating point only.
Status CheckReduceFor(const AllreduceOptions& o, const Tensor& t);
// Horovod's reducescatter supports Sum and Average only.
Status CheckScatterOp(const AllreduceOptions& o);
// Every tensor of `op` on one device (Horovod's rule); sets op.request.gpu.
Status SetDevice(Operation& op);

}  // namespace hvd::internal
