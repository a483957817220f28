// What the GPU tests share: loading this build's CUDA plugin, skipping (with the reason) where
// this machine has no GPU, and device buffers that free themselves.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "gpu/gpu_backend.h"

namespace hvd::runtime::gpu::testing {

// LoadGpuBackend, pointed at the plugin of this build tree (HVD_CUDA_PLUGIN_PATH, compiled in by
// tests/CMakeLists.txt) unless HVD_CUDA_PLUGIN is set already: the test binaries link the
// runtime statically, so "beside libhvd.so" would be build/tests/.
inline Status LoadBackend(GpuBackend** out) {
#ifdef HVD_CUDA_PLUGIN_PATH
  setenv("HVD_CUDA_PLUGIN", HVD_CUDA_PLUGIN_PATH, /*overwrite=*/0);
#endif
  return LoadGpuBackend(out);
}

// Device memory freed at scope exit; cudaMalloc's 256-byte alignment, offsets taken by the test.
class DeviceMemory {
 public:
  explicit DeviceMemory(size_t bytes) {
    if (cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceMemory() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  char* get() const { return static_cast<char*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

// A fixture whose tests skip, naming why, where no GPU can be used; else device 0 is ready.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status s = LoadBackend(&backend_);
    if (!s.ok()) GTEST_SKIP() << s.message();
    const Status d = backend_->GetDevice(0, &device_);
    ASSERT_TRUE(d.ok()) << d.ToString();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }

  GpuBackend* backend_ = nullptr;
  Device* device_ = nullptr;
};

}  // namespace hvd::runtime::gpu::testing

#define HVD_CUDA_OK(expr)                                                          \
  do {                                                                             \
    const cudaError_t hvd_e_ = (expr);                                             \
    ASSERT_EQ(hvd_e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(hvd_e_); \
  } while (0)
