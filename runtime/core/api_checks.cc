// The argument checks of the public API (core/api_checks.h).
#include "core/api_checks.h"

#include <cmath>
#include <span>
#include <string>

#include "collectives/reduce.h"
#include "gpu/gpu_backend.h"
#include "negotiation/message.h"

namespace hvd::internal {

using runtime::negotiation::ShapeString;

Status CheckTensor(const char* what, const Tensor& t) {
  if (!IsValid(t.dtype)) {
    return InvalidArgument(std::string(what) + ": invalid dtype " +
                           std::to_string(static_cast<int>(t.dtype)));
  }
  for (int64_t d : t.shape) {
    if (d < 0) {
      return InvalidArgument(std::string(what) + ": negative dimension in shape " +
                             ShapeString(t.shape));
    }
  }
  // Before anything multiplies it out: a product past 64 bits wrapped, and the runtime sized
  // buffers from the result (std::length_error ended the process, or an empty output was made).
  uint64_t bytes = 0;
  if (!t.shape.empty() && !runtime::negotiation::BytesWithin(
                              t.dtype, t.shape[0], std::span(t.shape).subspan(1), &bytes)) {
    return InvalidArgument(std::string(what) + ": shape " + ShapeString(t.shape) + " of " +
                           std::string(DataTypeName(t.dtype)) +
                           " has a dimension or a size past 2^48 (256 TiB of bytes), more than "
                           "any process can hold; the shape is wrong");
  }
  if (t.data == nullptr && t.num_elements() > 0) {
    return InvalidArgument(std::string(what) + ": data is null for a tensor of shape " +
                           ShapeString(t.shape));
  }
  if (t.device < -1) {
    return InvalidArgument(std::string(what) + ": device " + std::to_string(t.device) +
                           " is not a device; use -1 for host memory or a CUDA device ordinal");
  }
  if (t.device >= 0) {
    // Say first whether this process could use a GPU at all: that is what users need to fix.
    runtime::gpu::GpuBackend* gpu = nullptr;
    Status loaded = runtime::gpu::LoadGpuBackend(&gpu);
    if (!loaded.ok()) {
      return FailedPrecondition(std::string(what) + ": the tensor is on CUDA device " +
                                std::to_string(t.device) + ", but " + loaded.message() +
                                ". Pass host memory (device = -1).");
    }
    if (t.device >= gpu->device_count()) {
      return InvalidArgument(std::string(what) + ": the tensor is on CUDA device " +
                             std::to_string(t.device) + ", but this process sees " +
                             std::to_string(gpu->device_count()) +
                             " device(s) (CUDA_VISIBLE_DEVICES applies; docs/gpu.md)");
    }
  }
  return Status::OK();
}

Status CheckReduce(const AllreduceOptions& o) {
  if (!IsValid(o.op)) {
    return InvalidArgument("invalid reduce op " + std::to_string(static_cast<int>(o.op)));
  }
  // NaN equals nothing, not even itself: every rank's request would look mismatched.
  if (std::isnan(o.prescale) || std::isnan(o.postscale)) {
    return InvalidArgument(std::string(std::isnan(o.prescale) ? "prescale" : "postscale") +
                           " factor is NaN: a scale factor must be a number");
  }
  // Every element would come out infinite or NaN.
  if (std::isinf(o.prescale) || std::isinf(o.postscale)) {
    return InvalidArgument(std::string(std::isinf(o.prescale) ? "prescale" : "postscale") +
                           " factor is infinite: a scale factor must be a finite number");
  }
  return Status::OK();
}

// What every rank would reject alike, checked before anything is submitted.
Status CheckReduceFor(const AllreduceOptions& o, const Tensor& t) {
  HVD_RETURN_IF_ERROR(runtime::collectives::CheckReduceDtype(t.dtype, o.op));
  if (o.op == ReduceOp::kAdasum && t.dtype != DataType::kFloat32 && t.dtype != DataType::kFloat64 &&
      t.dtype != DataType::kFloat16 && t.dtype != DataType::kBFloat16) {
    return InvalidArgument(
        "Adasum needs floating-point tensors (float16, bfloat16, float32, "
        "float64); got " +
        std::string(DataTypeName(t.dtype)));
  }
  return Status::OK();
}

// Horovod's reducescatter supports Sum and Average only.
Status CheckScatterOp(const AllreduceOptions& o) {
  HVD_RETURN_IF_ERROR(CheckReduce(o));
  if (o.op != ReduceOp::kSum && o.op != ReduceOp::kAverage) {
    return InvalidArgument("reducescatter supports Sum and Average only (as Horovod's), not " +
                           std::string(ReduceOpName(o.op)));
  }
  return Status::OK();
}

Status CheckPair(const Tensor& in, const Tensor& out) {
  HVD_RETURN_IF_ERROR(CheckTensor("input", in));
  HVD_RETURN_IF_ERROR(CheckTensor("output", out));
  if (in.dtype != out.dtype || in.num_elements() != out.num_elements()) {
    return InvalidArgument("output (" + std::string(DataTypeName(out.dtype)) + " " +
                           ShapeString(out.shape) +
                           ") must have the input's dtype and element count (" +
                           std::string(DataTypeName(in.dtype)) + " " + ShapeString(in.shape) + ")");
  }
  return Status::OK();
}

// Every tensor of one operation lives on one device (Horovod's rule): the negotiation then knows
// whether the operation runs on GPUs (Request::gpu), and every rank must agree on that.
Status SetDevice(Operation& op) {
  int device = -1;
  bool first = true;
  auto check = [&](const std::vector<Tensor>& v, const char* what) -> Status {
    for (size_t i = 0; i < v.size(); ++i) {
      if (first) {
        device = v[i].device;
        first = false;
      } else if (v[i].device != device) {
        return InvalidArgument(
            std::string(what) + " " + std::to_string(i) + " is on " +
            (v[i].device < 0 ? "the host" : "CUDA device " + std::to_string(v[i].device)) +
            " but the operation's first tensor is on " +
            (device < 0 ? "the host" : "CUDA device " + std::to_string(device)) +
            ": every tensor of one operation must be on one device");
      }
    }
    return Status::OK();
  };
  HVD_RETURN_IF_ERROR(check(op.inputs, "input"));
  HVD_RETURN_IF_ERROR(check(op.outputs, "output"));
  op.request.gpu = device >= 0;
  if (device < 0) return Status::OK();
  // Record now, on the caller's thread, what the runtime's stream must wait for: the work queued
  // on the tensors' streams before this call, and nothing queued after it.
  runtime::gpu::GpuBackend* gpu = nullptr;
  HVD_RETURN_IF_ERROR(runtime::gpu::LoadGpuBackend(&gpu));
  runtime::gpu::Device* d = nullptr;
  HVD_RETURN_IF_ERROR(gpu->GetDevice(device, &d));
  for (const std::vector<Tensor>* v : {&op.inputs, &op.outputs}) {
    for (const Tensor& t : *v) {
      bool seen = false;
      for (const Operation::ReadyEvent& r : op.ready) seen = seen || r.stream == t.stream;
      if (seen) continue;
      Operation::ReadyEvent r;
      r.device = d;
      r.stream = t.stream;
      HVD_RETURN_IF_ERROR(d->RecordReady(t.stream, &r.event));
      op.ready.push_back(r);
    }
  }
  return Status::OK();
}

}  // namespace hvd::internal
