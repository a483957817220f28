// Whether this process can use CUDA devices, found out without linking CUDA.
//
// The runtime loads the CUDA runtime library (libcudart.so.13) with dlopen the first time a
// tensor names a CUDA device, so libhvd.so loads and CPU tensors work on hosts with no CUDA at
// all. The answer is computed once per process (creating a CUDA context can take hundreds of
// milliseconds) and names why there is no GPU: the library missing (every path tried), no driver,
// or a driver that sees no device.
#pragma once

#include <string>

#include "hvd/status.h"

namespace hvd::runtime::gpu {

struct CudaInfo {
  std::string library;      // the path dlopen accepted
  int runtime_version = 0;  // cudaRuntimeGetVersion: 13000 for CUDA 13.0
  int driver_version = 0;   // cudaDriverGetVersion: 0 when no driver is installed
  int device_count = 0;
};

// Loads the CUDA runtime (HVD_CUDART_LIBRARY, else libcudart.so.13 by the loader's search path,
// else /usr/local/cuda/lib64/libcudart.so.13) and counts devices. FailedPrecondition starting
// "no GPU: " with the reason when the process cannot use any device.
Status ProbeCuda(CudaInfo* info);

// ProbeCuda's result for this process, computed on the first call. Thread-safe.
const Status& CachedCudaProbe(CudaInfo* info = nullptr);

}  // namespace hvd::runtime::gpu
