// Device over the CUDA runtime: our non-blocking stream, the event that orders it after a
// caller's stream, the grow-only buffers and the batched copy of one CUDA device.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/cuda/batched_copy.h"
#include "gpu/gpu_backend.h"

namespace hvd::runtime::gpu::cuda {

class CudaDevice final : public Device {
 public:
  // Makes the stream, the event and the bus id on `ordinal`.
  static Status Create(int ordinal, std::unique_ptr<CudaDevice>* out);
  ~CudaDevice() override;

  int ordinal() const override { return ordinal_; }
  void* stream() override { return stream_; }
  std::string bus_id() const override { return bus_id_; }

  Status WaitFor(void* caller_stream) override;
  Status RecordReady(void* caller_stream, void** event) override;
  Status WaitReady(void* event) override;
  void ReleaseReady(void* event) override;
  Status Synchronize() override;
  Status Query(bool* done) override;
  Status Buffer(int slot, size_t bytes, void** out) override;
  Status Allocate(size_t bytes, void** out) override;
  void Free(void* p, void* stream) override;
  Status CopyToHost(void* dst, const void* src, size_t bytes) override;
  Status CopyToDevice(void* dst, const void* src, size_t bytes) override;
  Status BatchedCopy(const Segment* segments, size_t n, DataType dtype, double scale) override;

 private:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {}
  // Every method starts here: the background thread serves several devices, and cudaSetDevice
  // is cheap when the device is already current.
  Status SetDevice();
  // The results' pool, where the device supports memory pools (else pool_ stays null and
  // pool_error_ says why).
  Status CreatePool();
  // Freed result memory the pool keeps for the next results before returning it to the driver.
  static constexpr uint64_t kPoolKeepBytes = uint64_t{256} << 20;

  static constexpr int kSlots = 2;
  const int ordinal_;
  std::string bus_id_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t caller_done_ = nullptr;  // recorded on the caller's stream, waited on by ours
  // Results' memory (Allocate): a pool of our own, null where the device has no memory pools.
  cudaMemPool_t pool_ = nullptr;
  std::string pool_error_;
  void* buffers_[kSlots] = {};
  size_t buffer_bytes_[kSlots] = {};
  BatchedCopier copier_;
  std::mutex ready_mu_;                  // RecordReady runs on callers' threads
  std::vector<cudaEvent_t> ready_pool_;  // guarded by ready_mu_: free events
  std::vector<cudaEvent_t> ready_made_;  // guarded by ready_mu_: all, destroyed with the device
};

}  // namespace hvd::runtime::gpu::cuda
