// The batched copy kernel (batched_copy.h): one launch for every segment of a fused batch. The
// plan and each thread's work are in batched_copy_kernel.h (shared with a host emulation test);
// here are the launch, the half-precision scalings and the pinned staging of the segment table.
#include "gpu/cuda/batched_copy.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "gpu/cuda/batched_copy_kernel.h"
#include "gpu/cuda/cuda_check.h"

namespace hvd::runtime::gpu::cuda {
namespace {

// float16 and bfloat16: widened to float32, scaled, rounded back to nearest even.
struct ScaleHalf {
  float f;
  __device__ __half operator()(__half x) const { return __float2half_rn(__half2float(x) * f); }
};
struct ScaleBF16 {
  float f;
  __device__ __nv_bfloat16 operator()(__nv_bfloat16 x) const {
    return __float2bfloat16_rn(__bfloat162float(x) * f);
  }
};

// Block b finds its segment (thread 0, shared with the others), then every thread does its share
// (batched_copy_kernel.h).
template <typename T, typename Op>
__global__ void __launch_bounds__(kThreads) BatchedKernel(const Entry* table, int n, Op op) {
  __shared__ int seg;
  if (threadIdx.x == 0) seg = SegmentOf(table, n, blockIdx.x);
  __syncthreads();
  const Entry s = table[seg];
  CopyThread<T>(s, blockIdx.x - s.first_block, threadIdx.x, op);
}

template <typename T, typename Op>
Status Launch(const Entry* table, int n, uint64_t blocks, const Op& op, cudaStream_t stream) {
  BatchedKernel<T, Op><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(table, n, op);
  return CudaError(cudaGetLastError(), "BatchedCopy kernel launch (" + std::to_string(n) +
                                           " segments, " + std::to_string(blocks) + " blocks)");
}

}  // namespace

BatchedCopier::~BatchedCopier() {
  for (Slot& s : slots_) {
    if (s.done != nullptr) cudaEventDestroy(s.done);
    if (s.host != nullptr) cudaFreeHost(s.host);
    if (s.device != nullptr) cudaFree(s.device);
  }
}

Status BatchedCopier::AcquireSlot(size_t bytes, Slot** out) {
  // Round-robin over the slots; a slot whose kernel has not finished is skipped, and when every
  // one is busy a new one is made (up to kMaxSlots, then the oldest is waited for).
  constexpr size_t kMaxSlots = 16;
  Slot* chosen = nullptr;
  for (size_t tries = 0; tries < slots_.size(); ++tries) {
    Slot& s = slots_[(next_ + tries) % slots_.size()];
    const cudaError_t q = cudaEventQuery(s.done);
    if (q == cudaSuccess) {
      chosen = &s;
      next_ = (next_ + tries + 1) % slots_.size();
      break;
    }
    if (q != cudaErrorNotReady) return CudaError(q, "cudaEventQuery (BatchedCopy table)");
  }
  if (chosen == nullptr && slots_.size() < kMaxSlots) {
    cudaEvent_t done = nullptr;
    HVD_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
                             "cudaEventCreateWithFlags (BatchedCopy table)");
    slots_.emplace_back();
    chosen = &slots_.back();
    chosen->done = done;  // never recorded: cudaEventQuery says done
  }
  if (chosen == nullptr) {
    chosen = &slots_[next_];
    next_ = (next_ + 1) % slots_.size();
    HVD_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(chosen->done),
                             "cudaEventSynchronize (BatchedCopy table)");
  }
  if (chosen->capacity < bytes) {
    // Free only now that this slot's last kernel is known to be done (its event completed).
    const size_t capacity = std::max<size_t>(bytes, std::max<size_t>(4096, chosen->capacity * 2));
    if (chosen->host != nullptr) cudaFreeHost(chosen->host);
    if (chosen->device != nullptr) cudaFree(chosen->device);
    chosen->host = nullptr;
    chosen->device = nullptr;
    chosen->capacity = 0;
    HVD_CUDA_RETURN_IF_ERROR(
        cudaHostAlloc(&chosen->host, capacity, cudaHostAllocDefault),
        "cudaHostAlloc (BatchedCopy table, " + std::to_string(capacity) + " bytes)");
    HVD_CUDA_RETURN_IF_ERROR(
        cudaMalloc(&chosen->device, capacity),
        "cudaMalloc (BatchedCopy table, " + std::to_string(capacity) + " bytes)");
    chosen->capacity = capacity;
  }
  *out = chosen;
  return Status::OK();
}

Status BatchedCopier::Run(const Segment* segments, size_t n, DataType dtype, double scale,
                          cudaStream_t stream) {
  if (!IsValid(dtype)) {
    return InvalidArgument("BatchedCopy: invalid dtype " + std::to_string(static_cast<int>(dtype)));
  }
  const bool copy = scale == 1.0;
  if (!copy && dtype == DataType::kBool) {
    return InvalidArgument(
        "BatchedCopy: a bool tensor can only be copied (scale 1), not scaled by " +
        std::to_string(scale) + "; average is not defined for bool");
  }
  const size_t elem = DataTypeSize(dtype);
  const size_t unit_elem = copy ? 1 : elem;  // the copy path moves bytes
  // The table is built straight into the pinned slot, sized for every segment.
  Slot* slot = nullptr;
  HVD_RETURN_IF_ERROR(AcquireSlot(std::max<size_t>(n, 1) * sizeof(Entry), &slot));
  Entry* table = static_cast<Entry*>(slot->host);
  size_t used = 0;
  uint64_t blocks = 0;
  for (size_t i = 0; i < n; ++i) {
    const Segment& g = segments[i];
    if (g.count == 0) continue;
    const auto src = reinterpret_cast<uintptr_t>(g.src);
    const auto dst = reinterpret_cast<uintptr_t>(g.dst);
    if (src == 0 || dst == 0) {
      return InvalidArgument("BatchedCopy: segment " + std::to_string(i) + " has a null pointer");
    }
    if (!copy && ((src | dst) % elem) != 0) {
      return InvalidArgument("BatchedCopy: segment " + std::to_string(i) + " is not aligned to " +
                             std::string(DataTypeName(dtype)) + " (" + std::to_string(elem) +
                             " bytes): src " + std::to_string(src) + ", dst " +
                             std::to_string(dst));
    }
    blocks +=
        PlanEntry(g.src, g.dst, g.count * (elem / unit_elem), unit_elem, blocks, &table[used++]);
  }
  if (used == 0) return Status::OK();
  if (blocks > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
    return InvalidArgument("BatchedCopy: " + std::to_string(blocks) +
                           " blocks exceed CUDA's grid limit: split the batch");
  }
  HVD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(slot->device, slot->host, used * sizeof(Entry), cudaMemcpyHostToDevice,
                      stream),
      "cudaMemcpyAsync (BatchedCopy table, " + std::to_string(used) + " segments)");
  const Entry* t = static_cast<const Entry*>(slot->device);
  const int m = static_cast<int>(used);
  Status st;
  if (copy) {
    st = Launch<uint8_t>(t, m, blocks, CopyOp{}, stream);
  } else {
    const float f = static_cast<float>(scale);
    const long long divisor = collectives::ExactDivisor(scale);  // integers: see ScaleInt
    switch (dtype) {
      case DataType::kFloat32:
        st = Launch<float>(t, m, blocks, ScaleF32{f}, stream);
        break;
      case DataType::kFloat64:
        st = Launch<double>(t, m, blocks, ScaleF64{scale}, stream);
        break;
      case DataType::kFloat16:
        st = Launch<__half>(t, m, blocks, ScaleHalf{f}, stream);
        break;
      case DataType::kBFloat16:
        st = Launch<__nv_bfloat16>(t, m, blocks, ScaleBF16{f}, stream);
        break;
      case DataType::kInt8:
        st = Launch<int8_t>(t, m, blocks, ScaleInt<int8_t>{scale, divisor}, stream);
        break;
      case DataType::kUInt8:
        st = Launch<uint8_t>(t, m, blocks, ScaleInt<uint8_t>{scale, divisor}, stream);
        break;
      case DataType::kInt16:
        st = Launch<int16_t>(t, m, blocks, ScaleInt<int16_t>{scale, divisor}, stream);
        break;
      case DataType::kInt32:
        st = Launch<int32_t>(t, m, blocks, ScaleInt<int32_t>{scale, divisor}, stream);
        break;
      case DataType::kInt64:
        st = Launch<int64_t>(t, m, blocks, ScaleInt<int64_t>{scale, divisor}, stream);
        break;
      case DataType::kBool:
        break;  // refused above
    }
  }
  HVD_RETURN_IF_ERROR(st);
  // The slot (host and device table) is free again once this kernel has run.
  return CudaError(cudaEventRecord(slot->done, stream), "cudaEventRecord (BatchedCopy table)");
}

}  // namespace hvd::runtime::gpu::cuda
