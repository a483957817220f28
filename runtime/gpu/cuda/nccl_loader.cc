#include "gpu/cuda/nccl_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <type_traits>
#include <vector>

#include "gpu/dlopen_first.h"

namespace hvd::runtime::gpu::cuda {

#ifdef HVD_HAVE_NCCL_H
namespace {

// Non-blocking communicators (ncclConfig_t.blocking = 0) and ncclCommGetAsyncError's
// ncclInProgress came with NCCL 2.14.
constexpr int kMinVersion = NCCL_VERSION(2, 14, 0);

Status Load(NcclApi* api) {
  // HVD_NCCL_LIBRARY is declared (documented, logged) in runtime/gpu/gpu_backend.cc; this plugin
  // links no hvd library, so it reads the variable itself.
  const char* configured = std::getenv("HVD_NCCL_LIBRARY");
  std::vector<std::string> candidates;
  if (configured != nullptr && configured[0] != '\0') {
    candidates.push_back(configured);
  } else {
    candidates = {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"};
  }
  std::string tried;
  // Never closed: NCCL's proxy threads outlive any communicator. A process that already has NCCL
  // (PyTorch's) gets that same copy back, by its soname.
  void* lib = runtime::gpu::DlopenFirst(candidates, &api->library, &tried);
  if (lib == nullptr) {
    return FailedPrecondition("NCCL could not be loaded (" + tried +
                              "); install NCCL 2 (libnccl.so.2) or set HVD_NCCL_LIBRARY to its "
                              "path");
  }
  std::string missing;
  auto sym = [&](auto* fn, const char* name) {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
    if (*fn == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
  sym(&api->GetVersion, "ncclGetVersion");
  sym(&api->GetUniqueId, "ncclGetUniqueId");
  sym(&api->CommInitRankConfig, "ncclCommInitRankConfig");
  sym(&api->CommGetAsyncError, "ncclCommGetAsyncError");
  sym(&api->CommFinalize, "ncclCommFinalize");
  sym(&api->CommDestroy, "ncclCommDestroy");
  sym(&api->CommAbort, "ncclCommAbort");
  sym(&api->GetErrorString, "ncclGetErrorString");
  sym(&api->GetLastError, "ncclGetLastError");
  sym(&api->AllReduce, "ncclAllReduce");
  sym(&api->Broadcast, "ncclBroadcast");
  sym(&api->AllGather, "ncclAllGather");
  sym(&api->ReduceScatter, "ncclReduceScatter");
  sym(&api->Send, "ncclSend");
  sym(&api->Recv, "ncclRecv");
  sym(&api->GroupStart, "ncclGroupStart");
  sym(&api->GroupEnd, "ncclGroupEnd");
  if (api->GetVersion != nullptr) api->GetVersion(&api->version);
  if (!missing.empty()) {
    return FailedPrecondition(api->library + " (NCCL " + std::to_string(api->version) + ") lacks " +
                              missing +
                              ": hvd needs NCCL 2.14 or later; set "
                              "HVD_NCCL_LIBRARY to a newer libnccl.so.2");
  }
  if (api->version < kMinVersion) {
    return FailedPrecondition(api->library + " is NCCL " + std::to_string(api->version) +
                              ": hvd needs 2.14 or later (non-blocking communicators); set "
                              "HVD_NCCL_LIBRARY to a newer libnccl.so.2");
  }
  return Status::OK();
}

}  // namespace

Status NcclError(const NcclApi& api, ncclResult_t r, const std::string& call) {
  std::string m = call + ": " + api.GetErrorString(r) + " (ncclResult " + std::to_string(r) + ")";
  const char* last = api.GetLastError(nullptr);  // its argument is unused (NCCL's docs)
  if (last != nullptr && last[0] != '\0') m += "; NCCL's last error: " + std::string(last);
  m += " (NCCL_DEBUG=WARN shows NCCL's own log)";
  switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return InvalidArgument(m);
    case ncclInternalError:
      return Internal(m);
    default:  // system, remote, CUDA errors: a peer, the network or the device failed
      return Unavailable(m);
  }
}

Status LoadNcclApi(const NcclApi** out) {
  static std::once_flag once;
  static NcclApi api;
  static Status status;
  std::call_once(once, [] { status = Load(&api); });
  *out = status.ok() ? &api : nullptr;
  return status;
}

#else  // !HVD_HAVE_NCCL_H

Status LoadNcclApi(const NcclApi** out) {
  *out = nullptr;
  return FailedPrecondition(
      "this libhvd_cuda.so was built without nccl.h (CMake found none: set "
      "-DHVD_NCCL_INCLUDE_DIR=<folder of nccl.h> and rebuild); device tensors go through the "
      "host");
}

#endif

}  // namespace hvd::runtime::gpu::cuda
