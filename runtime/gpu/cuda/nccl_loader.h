// NCCL through dlopen: libhvd_cuda.so never links libnccl, so a host without NCCL still loads it
// (device tensors then go through the host). Types and signatures come from nccl.h at compile
// time (HVD_HAVE_NCCL_H), the functions from dlsym, typed with decltype.
#pragma once

#include <string>

#include "hvd/status.h"

#ifdef HVD_HAVE_NCCL_H
#include <nccl.h>
#endif

namespace hvd::runtime::gpu::cuda {

#ifdef HVD_HAVE_NCCL_H
struct NcclApi {
  std::string library;  // the path dlopen accepted
  int version = 0;      // ncclGetVersion: 22809 for 2.28.9
  decltype(&::ncclGetVersion) GetVersion = nullptr;
  decltype(&::ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&::ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&::ncclCommFinalize) CommFinalize = nullptr;
  decltype(&::ncclCommDestroy) CommDestroy = nullptr;
  decltype(&::ncclCommAbort) CommAbort = nullptr;
  decltype(&::ncclGetErrorString) GetErrorString = nullptr;
  decltype(&::ncclGetLastError) GetLastError = nullptr;
  decltype(&::ncclAllReduce) AllReduce = nullptr;
  decltype(&::ncclBroadcast) Broadcast = nullptr;
  decltype(&::ncclAllGather) AllGather = nullptr;
  decltype(&::ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&::ncclSend) Send = nullptr;
  decltype(&::ncclRecv) Recv = nullptr;
  decltype(&::ncclGroupStart) GroupStart = nullptr;
  decltype(&::ncclGroupEnd) GroupEnd = nullptr;
};

// `call` failed with `r`: the message names the call, NCCL's text for the code and NCCL's last
// error (ncclGetLastError), and says how to see more.
Status NcclError(const NcclApi& api, ncclResult_t r, const std::string& call);
#else
struct NcclApi {
  std::string library;
  int version = 0;
};
#endif

// Loads NCCL once per process: HVD_NCCL_LIBRARY, else libnccl.so.2 by the loader's search path,
// else /usr/local/cuda/lib64/libnccl.so.2. FailedPrecondition naming every path tried, a missing
// function, a too old NCCL (ncclCommInitRankConfig needs 2.14), or a build without nccl.h.
// Thread-safe; later calls return the first result.
Status LoadNcclApi(const NcclApi** out);

}  // namespace hvd::runtime::gpu::cuda
