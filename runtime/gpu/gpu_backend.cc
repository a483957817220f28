// LoadGpuBackend: finds libhvd_cuda.so with dlopen, so that libhvd.so itself never links CUDA.
//
// Order: the CUDA probe first (it names the precise reason a host cannot use a GPU: no runtime
// library, no driver, no device), then the plugin from HVD_CUDA_PLUGIN, else the file beside the
// binary that holds this code (libhvd.so in an installed or build-tree layout, where CMake puts
// libhvd_cuda.so next to it), else the loader's search path. The result is cached: loading twice
// would create a second CUDA backend with its own streams.
#include "gpu/gpu_backend.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "base/logging.h"
#include "base/settings.h"
#include "gpu/cuda_probe.h"
#include "gpu/dlopen_first.h"

namespace hvd::runtime::gpu {
namespace {

const base::Setting<std::string> kCudaPlugin(
    "HVD_CUDA_PLUGIN", nullptr, "",
    "path of libhvd_cuda.so, hvd's CUDA/NCCL plugin; unset: the file beside libhvd.so, then the "
    "loader's search path");

// Read by the plugin itself (runtime/gpu/cuda/nccl_loader.cc, with getenv: the plugin links no
// hvd library). Declared here so that it is documented, checked against docs/configuration.md and
// logged at Init with every other setting the environment sets.
const base::Setting<std::string> kNcclLibrary(
    "HVD_NCCL_LIBRARY", nullptr, "",
    "path of the NCCL library for GPU collectives; unset: libnccl.so.2 from the loader's search "
    "path, then /usr/local/cuda/lib64");

#ifdef HVD_CUDA_PLUGIN_BUILT
constexpr bool kPluginBuilt = true;
#else
constexpr bool kPluginBuilt = false;
#endif

// The folder of the shared object (or executable) that holds this function, with a trailing '/';
// empty when the loader cannot say.
std::string OwnDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&OwnDirectory), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

struct Loaded {
  Status status;
  std::unique_ptr<GpuBackend> backend;
};

Loaded Load() {
  Loaded r;
  CudaInfo cuda;
  r.status = CachedCudaProbe(&cuda);
  if (!r.status.ok()) return r;

  std::string configured;
  r.status = kCudaPlugin.Get(&configured);
  if (!r.status.ok()) return r;
  if (configured.empty() && !kPluginBuilt) {
    r.status = FailedPrecondition(
        "no GPU: this build of hvd has no CUDA support (configured with -DHVD_WITH_CUDA=OFF, or "
        "without the CUDA toolkit at /usr/local/cuda); rebuild with the toolkit, or set "
        "HVD_CUDA_PLUGIN to a libhvd_cuda.so built for this version");
    return r;
  }
  std::vector<std::string> candidates;
  if (!configured.empty()) {
    candidates.push_back(configured);
  } else {
    const std::string dir = OwnDirectory();
    if (!dir.empty()) candidates.push_back(dir + "libhvd_cuda.so");
    candidates.push_back("libhvd_cuda.so");
  }
  std::string loaded_from;
  std::string tried;
  // Never closed: the backend's CUDA streams and NCCL threads live as long as the process.
  void* lib = DlopenFirst(candidates, &loaded_from, &tried);
  if (lib == nullptr) {
    r.status = FailedPrecondition(
        "no GPU: hvd's CUDA plugin could not be loaded (" + tried +
        "); put libhvd_cuda.so from the same build beside libhvd.so, or set HVD_CUDA_PLUGIN to "
        "its path");
    return r;
  }
  auto create = reinterpret_cast<CreateGpuBackendFn>(dlsym(lib, kCreateGpuBackendSymbol));
  if (create == nullptr) {
    r.status = FailedPrecondition("no GPU: " + loaded_from + " has no " +
                                  std::string(kCreateGpuBackendSymbol) +
                                  ": not hvd's CUDA plugin? Set HVD_CUDA_PLUGIN to libhvd_cuda.so");
    return r;
  }
  // The plugin compares `abi` with its own kGpuBackendAbi and refuses a libhvd.so of another
  // build: the classes' layouts would not agree.
  r.status = create(kGpuBackendAbi, &r.backend);
  if (r.status.ok() && r.backend == nullptr) {
    r.status =
        Internal(loaded_from + ": " + kCreateGpuBackendSymbol + " returned OK and no backend");
  }
  if (!r.status.ok()) {
    r.backend.reset();
    r.status = FailedPrecondition("no GPU: " + loaded_from + ": " + r.status.message());
    return r;
  }
  HVD_LOG(INFO) << "GPU backend loaded from " << loaded_from << ": " << r.backend->Describe();
  return r;
}

}  // namespace

static std::atomic<GpuBackend*> g_testing_backend{nullptr};

void SetGpuBackendForTesting(GpuBackend* backend) {
  g_testing_backend.store(backend);
}

Status LoadGpuBackend(GpuBackend** out) {
  if (GpuBackend* testing = g_testing_backend.load()) {
    *out = testing;
    return Status::OK();
  }
  static std::once_flag once;
  static Loaded* loaded = nullptr;  // leaked: the backend may be used until the process exits
  std::call_once(once, [] { loaded = new Loaded(Load()); });
  *out = loaded->status.ok() ? loaded->backend.get() : nullptr;
  return loaded->status;
}

}  // namespace hvd::runtime::gpu

// The C ABI's build flag (Horovod's cuda_built(); python/hvd/common/build_info.py asks for it): 1
// when this build made libhvd_cuda.so, whether or not this host has a GPU.
extern "C" __attribute__((visibility("default"))) int hvd_cuda_built(void) {
  return hvd::runtime::gpu::kPluginBuilt ? 1 : 0;
}
