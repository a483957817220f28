#include "gpu/cuda/device.h"

#include <algorithm>
#include <cctype>

#include "gpu/cuda/cuda_check.h"

namespace hvd::runtime::gpu::cuda {

Status CudaDevice::Create(int ordinal, std::unique_ptr<CudaDevice>* out) {
  std::unique_ptr<CudaDevice> d(new CudaDevice(ordinal));
  // Possibly on a caller's thread (its first device tensor): its current device is kept.
  ScopedDevice keep(ordinal);
  HVD_CUDA_RETURN_IF_ERROR(keep.error(), "cudaSetDevice(" + std::to_string(ordinal) + ")");
  const std::string on = " (device " + std::to_string(ordinal) + ")";
  // Non-blocking: our stream never synchronizes with the legacy default stream, so a caller's
  // work elsewhere never stalls our copies and NCCL calls (nor ours theirs).
  HVD_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&d->stream_, cudaStreamNonBlocking),
                           "cudaStreamCreateWithFlags" + on);
  // Without timing, recording and waiting is the cheapest the driver offers; one event, reused:
  // cudaStreamWaitEvent waits for the record made before it, whatever is recorded later.
  HVD_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&d->caller_done_, cudaEventDisableTiming),
                           "cudaEventCreateWithFlags" + on);
  char bus[32] = {};
  HVD_CUDA_RETURN_IF_ERROR(cudaDeviceGetPCIBusId(bus, sizeof(bus), ordinal),
                           "cudaDeviceGetPCIBusId" + on);
  d->bus_id_ = bus;
  // Without a pool the device still works: Allocate says why, and results go to host memory.
  const Status pool = d->CreatePool();
  if (!pool.ok()) {
    if (d->pool_ != nullptr) cudaMemPoolDestroy(d->pool_);
    d->pool_ = nullptr;
    d->pool_error_ = pool.message();
    (void)cudaGetLastError();
  }
  // "0000:3B:00.0" from CUDA; lower case, as NCCL and sysfs write it.
  std::transform(d->bus_id_.begin(), d->bus_id_.end(), d->bus_id_.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  *out = std::move(d);
  return Status::OK();
}

CudaDevice::~CudaDevice() {
  if (cudaSetDevice(ordinal_) != cudaSuccess) return;  // the context is gone: nothing to free
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (void* b : buffers_) {
    if (b != nullptr) cudaFree(b);
  }
  if (caller_done_ != nullptr) cudaEventDestroy(caller_done_);
  if (pool_ != nullptr) cudaMemPoolDestroy(pool_);
  for (cudaEvent_t e : ready_made_) cudaEventDestroy(e);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  // copier_ frees its tables after this body, with the device still current.
}

Status CudaDevice::SetDevice() {
  return CudaError(cudaSetDevice(ordinal_), "cudaSetDevice(" + std::to_string(ordinal_) + ")");
}

Status CudaDevice::WaitFor(void* caller_stream) {
  HVD_RETURN_IF_ERROR(SetDevice());
  HVD_CUDA_RETURN_IF_ERROR(
      cudaEventRecord(caller_done_, static_cast<cudaStream_t>(caller_stream)),
      "cudaEventRecord on the caller's stream (device " + std::to_string(ordinal_) + ")");
  HVD_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, caller_done_, 0),
                           "cudaStreamWaitEvent (device " + std::to_string(ordinal_) + ")");
  return Status::OK();
}

Status CudaDevice::RecordReady(void* caller_stream, void** event) {
  ScopedDevice keep(ordinal_);
  HVD_CUDA_RETURN_IF_ERROR(keep.error(), "cudaSetDevice(" + std::to_string(ordinal_) + ")");
  cudaEvent_t e = nullptr;
  {
    std::lock_guard<std::mutex> lock(ready_mu_);
    if (!ready_pool_.empty()) {
      e = ready_pool_.back();
      ready_pool_.pop_back();
    }
  }
  if (e == nullptr) {
    HVD_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                             "cudaEventCreateWithFlags (device " + std::to_string(ordinal_) + ")");
    std::lock_guard<std::mutex> lock(ready_mu_);
    ready_made_.push_back(e);
  }
  const cudaError_t err = cudaEventRecord(e, static_cast<cudaStream_t>(caller_stream));
  if (err != cudaSuccess) {
    ReleaseReady(e);
    return CudaError(err, "cudaEventRecord on the caller's stream (device " +
                              std::to_string(ordinal_) +
                              "; is the stream on this device and still alive?)");
  }
  *event = e;
  return Status::OK();
}

Status CudaDevice::WaitReady(void* event) {
  HVD_RETURN_IF_ERROR(SetDevice());
  // cudaStreamWaitEvent waits for the record made before it: the event may be recorded again
  // for another operation as soon as this returns.
  const cudaError_t err = cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(event), 0);
  ReleaseReady(event);
  return CudaError(err, "cudaStreamWaitEvent (device " + std::to_string(ordinal_) + ")");
}

void CudaDevice::ReleaseReady(void* event) {
  std::lock_guard<std::mutex> lock(ready_mu_);
  ready_pool_.push_back(static_cast<cudaEvent_t>(event));
}

Status CudaDevice::Synchronize() {
  HVD_RETURN_IF_ERROR(SetDevice());
  return CudaError(cudaStreamSynchronize(stream_),
                   "cudaStreamSynchronize (device " + std::to_string(ordinal_) +
                       "; an earlier kernel, copy or NCCL call on hvd's stream failed)");
}

Status CudaDevice::Query(bool* done) {
  HVD_RETURN_IF_ERROR(SetDevice());
  const cudaError_t e = cudaStreamQuery(stream_);
  *done = e == cudaSuccess;
  if (e == cudaErrorNotReady) return Status::OK();
  return CudaError(e, "cudaStreamQuery (device " + std::to_string(ordinal_) +
                          "; an earlier kernel, copy or NCCL call on hvd's stream failed)");
}

Status CudaDevice::Buffer(int slot, size_t bytes, void** out) {
  if (slot < 0 || slot >= kSlots) {
    return InvalidArgument("Device::Buffer: slot " + std::to_string(slot) + " is not 0 or 1");
  }
  HVD_RETURN_IF_ERROR(SetDevice());
  if (buffer_bytes_[slot] < bytes || buffers_[slot] == nullptr) {
    // Grown by at least a quarter (in whole MiB) so that a slowly growing batch does not
    // reallocate every cycle. Work still queued may use the old buffer: drain our stream first
    // (cudaFree would wait for the whole device anyway).
    const size_t mib = size_t{1} << 20;
    size_t want = std::max(bytes, buffer_bytes_[slot] + buffer_bytes_[slot] / 4);
    want = std::max(mib, (want + mib - 1) / mib * mib);
    if (buffers_[slot] != nullptr) {
      HVD_CUDA_RETURN_IF_ERROR(
          cudaStreamSynchronize(stream_),
          "cudaStreamSynchronize before growing buffer " + std::to_string(slot));
      cudaFree(buffers_[slot]);
      buffers_[slot] = nullptr;
      buffer_bytes_[slot] = 0;
    }
    HVD_CUDA_RETURN_IF_ERROR(cudaMalloc(&buffers_[slot], want),
                             "cudaMalloc of " + std::to_string(want) + " bytes for buffer " +
                                 std::to_string(slot) + " on device " + std::to_string(ordinal_) +
                                 " (lower HVD_FUSION_THRESHOLD if the GPU is full)");
    buffer_bytes_[slot] = want;
  }
  *out = buffers_[slot];
  return Status::OK();
}

Status CudaDevice::CreatePool() {
  int supported = 0;
  if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, ordinal_) !=
          cudaSuccess ||
      supported == 0) {
    (void)cudaGetLastError();
    return FailedPrecondition("CUDA device " + std::to_string(ordinal_) +
                              " has no stream-ordered memory pools");
  }
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = ordinal_;
  const std::string on = " (device " + std::to_string(ordinal_) + ")";
  HVD_CUDA_RETURN_IF_ERROR(cudaMemPoolCreate(&pool_, &props), "cudaMemPoolCreate" + on);
  // A pool of our own, so that reusing memory a caller freed on its stream never makes our
  // stream wait for that stream (the default pool may insert such a dependency: communication
  // queued behind the caller's computation), and memory up to the threshold stays cached between
  // operations instead of going back to the driver at every synchronization.
  int no = 0;
  HVD_CUDA_RETURN_IF_ERROR(
      cudaMemPoolSetAttribute(pool_, cudaMemPoolReuseAllowInternalDependencies, &no),
      "cudaMemPoolSetAttribute(ReuseAllowInternalDependencies)" + on);
  uint64_t keep = kPoolKeepBytes;  // the attribute is a cuuint64_t (unsigned 64 bits)
  HVD_CUDA_RETURN_IF_ERROR(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep),
                           "cudaMemPoolSetAttribute(ReleaseThreshold)" + on);
  return Status::OK();
}

Status CudaDevice::Allocate(size_t bytes, void** out) {
  if (pool_ == nullptr) return FailedPrecondition(pool_error_);
  HVD_RETURN_IF_ERROR(SetDevice());
  // Stream-ordered, without the device-wide synchronization of cudaMalloc/cudaFree.
  const cudaError_t e = cudaMallocFromPoolAsync(out, std::max<size_t>(bytes, 1), pool_, stream_);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // an out-of-memory error must not stick to the next call
    return CudaError(e, "cudaMallocFromPoolAsync of " + std::to_string(bytes) +
                            " bytes for a result on device " + std::to_string(ordinal_));
  }
  return Status::OK();
}

void CudaDevice::Free(void* p, void* stream) {
  if (p == nullptr) return;
  // On a user's thread (the handle's last owner): its current device is kept.
  ScopedDevice keep(ordinal_);
  if (keep.error() != cudaSuccess) return;
  (void)cudaFreeAsync(p, static_cast<cudaStream_t>(stream));
}

Status CudaDevice::CopyToHost(void* dst, const void* src, size_t bytes) {
  HVD_RETURN_IF_ERROR(SetDevice());
  return CudaError(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_),
                   "cudaMemcpyAsync device to host (" + std::to_string(bytes) + " bytes, device " +
                       std::to_string(ordinal_) + ")");
}

Status CudaDevice::CopyToDevice(void* dst, const void* src, size_t bytes) {
  HVD_RETURN_IF_ERROR(SetDevice());
  return CudaError(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_),
                   "cudaMemcpyAsync host to device (" + std::to_string(bytes) + " bytes, device " +
                       std::to_string(ordinal_) + ")");
}

Status CudaDevice::BatchedCopy(const Segment* segments, size_t n, DataType dtype, double scale) {
  HVD_RETURN_IF_ERROR(SetDevice());
  return copier_.Run(segments, n, dtype, scale, stream_)
      .WithContext("BatchedCopy on device " + std::to_string(ordinal_));
}

}  // namespace hvd::runtime::gpu::cuda
