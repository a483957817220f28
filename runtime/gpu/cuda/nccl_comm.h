// NcclComm over a non-blocking NCCL communicator (ncclConfig_t.blocking = 0): no NCCL call ever
// blocks the background thread waiting for peers, so a communicator can always be aborted and
// its initialization bounded by a deadline.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "gpu/cuda/nccl_loader.h"
#include "gpu/gpu_backend.h"

namespace hvd::runtime::gpu::cuda {

// ncclCommInitRankConfig on `device`, polled with ncclCommGetAsyncError every millisecond;
// `cancelled` every 10 ms. On timeout or cancellation the half-made communicator is aborted
// (ncclCommAbort) and DeadlineExceeded or cancelled()'s Status returned. `id` holds the 128 bytes
// of rank 0's ncclGetUniqueId.
Status NcclInitComm(const NcclApi* api, const std::string& id, int rank, int size, int device,
                    std::chrono::milliseconds timeout, const std::function<Status()>& cancelled,
                    std::unique_ptr<NcclComm>* out);

}  // namespace hvd::runtime::gpu::cuda
