// CUDA runtime errors as hvd Statuses: every message names the call that failed and CUDA's own
// words for why ("cudaMemcpyAsync (device 0): an illegal memory access was encountered
// (cudaErrorIllegalAddress)").
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "hvd/status.h"

namespace hvd::runtime::gpu::cuda {

inline Status CudaError(cudaError_t err, const std::string& call) {
  if (err == cudaSuccess) return Status::OK();
  // A sticky error (an illegal address, a kernel fault) poisons the context: say so, since every
  // later call fails the same way and only a new process recovers.
  const bool sticky = err == cudaErrorIllegalAddress || err == cudaErrorLaunchFailure ||
                      err == cudaErrorMisalignedAddress || err == cudaErrorHardwareStackError ||
                      err == cudaErrorIllegalInstruction || err == cudaErrorInvalidPc ||
                      err == cudaErrorAssert;
  std::string m = call + ": " + cudaGetErrorString(err) + " (" + cudaGetErrorName(err) + ")";
  if (sticky) m += "; the CUDA context is unusable from now on: restart the process";
  // A bad pointer or ordinal is the caller's; anything else is the device's (out of memory, a
  // fault, a lost GPU): Unavailable, never kInternal, which means a bug in hvd.
  if (err == cudaErrorInvalidValue || err == cudaErrorInvalidDevice ||
      err == cudaErrorInvalidDevicePointer) {
    return InvalidArgument(m);
  }
  return Status(StatusCode::kUnavailable, m);
}

// Makes `device` current for a scope and restores the thread's previous device: calls made on a
// caller's thread (a submission, hvd::Shutdown, an atexit handler) must never move it to another
// GPU. error() is cudaSetDevice's (cudaErrorCudartUnloading at process exit: the driver reclaims
// everything then, and no CUDA or NCCL call may follow).
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    error_ = cudaSetDevice(device);
    changed_ = error_ == cudaSuccess && previous_ >= 0 && previous_ != device;
  }
  ~ScopedDevice() {
    if (changed_) cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  cudaError_t error() const { return error_; }

 private:
  int previous_ = -1;
  cudaError_t error_ = cudaSuccess;
  bool changed_ = false;
};

}  // namespace hvd::runtime::gpu::cuda

// Returns from the enclosing function with a Status naming `call` when it fails.
#define HVD_CUDA_RETURN_IF_ERROR(expr, call)                            \
  do {                                                                  \
    const cudaError_t hvd_cuda_err_ = (expr);                           \
    if (hvd_cuda_err_ != cudaSuccess)                                   \
      return ::hvd::runtime::gpu::cuda::CudaError(hvd_cuda_err_, call); \
  } while (0)
