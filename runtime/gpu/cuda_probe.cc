#include "gpu/cuda_probe.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "base/settings.h"
#include "gpu/dlopen_first.h"

namespace hvd::runtime::gpu {
namespace {

const base::Setting<std::string> kCudartLibrary(
    "HVD_CUDART_LIBRARY", nullptr, "",
    "path of the CUDA runtime library to load for GPU tensors; unset: libcudart.so.13 from the "
    "loader's search path, then /usr/local/cuda/lib64");

// cudaError_t is an int-sized enum; 0 is cudaSuccess. Declared here so that no CUDA header is
// needed to build.
using GetCountFn = int (*)(int*);
using GetVersionFn = int (*)(int*);
using ErrorStringFn = const char* (*)(int);

}  // namespace

Status ProbeCuda(CudaInfo* info) {
  *info = CudaInfo();
  std::string configured;
  HVD_RETURN_IF_ERROR(kCudartLibrary.Get(&configured));
  std::vector<std::string> candidates;
  if (!configured.empty()) {
    candidates.push_back(configured);
  } else {
    candidates = {"libcudart.so.13", "/usr/local/cuda/lib64/libcudart.so.13"};
  }
  std::string tried;
  // Never closed: CUDA keeps per-process state and threads that outlive any unload.
  void* lib = DlopenFirst(candidates, &info->library, &tried);
  if (lib == nullptr) {
    return FailedPrecondition("no GPU: the CUDA runtime library could not be loaded (" + tried +
                              "); install CUDA 13 or set HVD_CUDART_LIBRARY");
  }
  auto count = reinterpret_cast<GetCountFn>(dlsym(lib, "cudaGetDeviceCount"));
  auto runtime_version = reinterpret_cast<GetVersionFn>(dlsym(lib, "cudaRuntimeGetVersion"));
  auto driver_version = reinterpret_cast<GetVersionFn>(dlsym(lib, "cudaDriverGetVersion"));
  auto error_string = reinterpret_cast<ErrorStringFn>(dlsym(lib, "cudaGetErrorString"));
  if (count == nullptr || runtime_version == nullptr || driver_version == nullptr ||
      error_string == nullptr) {
    return FailedPrecondition("no GPU: " + info->library +
                              " lacks cudaGetDeviceCount, cudaRuntimeGetVersion, "
                              "cudaDriverGetVersion or cudaGetErrorString: not a CUDA runtime?");
  }
  runtime_version(&info->runtime_version);
  driver_version(&info->driver_version);
  int n = 0;
  const int err = count(&n);
  if (err != 0) {
    const std::string what = error_string(err) ? error_string(err) : "unknown error";
    if (info->driver_version == 0) {
      return FailedPrecondition(
          "no GPU: no NVIDIA driver is installed (cudaDriverGetVersion "
          "reports none; cudaGetDeviceCount: " +
          what + ")");
    }
    return FailedPrecondition("no GPU: cudaGetDeviceCount failed: " + what + " (error " +
                              std::to_string(err) + ", driver " +
                              std::to_string(info->driver_version) + ", runtime " +
                              std::to_string(info->runtime_version) + ")");
  }
  info->device_count = n;
  if (n == 0) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return FailedPrecondition("no GPU: the NVIDIA driver sees no device (CUDA_VISIBLE_DEVICES=" +
                              std::string(visible ? visible : "(unset)") + ")");
  }
  return Status::OK();
}

const Status& CachedCudaProbe(CudaInfo* info) {
  static std::once_flag once;
  static Status status;
  static CudaInfo cached;
  std::call_once(once, [] { status = ProbeCuda(&cached); });
  if (info != nullptr) *info = cached;
  return status;
}

}  // namespace hvd::runtime::gpu
