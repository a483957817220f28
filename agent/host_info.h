// What an agent tells the launcher about its host: name, the address ranks here are reached at,
// and its GPUs. Detection is split from the pure parts (GpuIds, CudaDeviceForSlot) so those are
// tested without a GPU.
#pragma once

#include <string>
#include <vector>

#include "hvd/status.h"

namespace hvd::agent {

// The local IP address this host uses to reach `host_port` (the launcher), found by connecting a
// UDP socket (no packet is sent) and reading its local address. That is the address on the
// network the launcher shares with this host, which is what other hosts' ranks should dial too.
Status LocalAddressTowards(const std::string& host_port, std::string* address);

// Number of /dev/nvidiaN device nodes in `dev_dir` (the last resort of gpu_inventory.h).
int CountNvidiaDevices(const std::string& dev_dir = "/dev");

// The CUDA device ids workers may be given: the agent's own CUDA_VISIBLE_DEVICES when it has one
// (`cuda_visible_devices` non-null; empty means none), else 0..device_count-1.
std::vector<std::string> GpuIds(int device_count, const char* cuda_visible_devices);


// The CUDA_VISIBLE_DEVICES value for a rank in `slot`: one GPU per slot, wrapping around when
// there are more slots than GPUs; "" when there are no GPUs (the variable is then not set).
std::string CudaDeviceForSlot(const std::vector<std::string>& gpus, int slot);

// The CUDA_VISIBLE_DEVICES the agent gives a rank in `slot` with `local_rank`, over the host's
// `gpus` (GpuIds); false: the agent sets none and the rank keeps the agent's own (docs/gpu.md).
//   isolate (hvdrun --gpu-isolation): the slot's GPU alone (CudaDeviceForSlot); the rank sees it
//     as device 0.
//   otherwise: every GPU stays visible, as horovodrun and torchrun leave them, so that
//     torch.cuda.set_device(hvd.local_rank()) works. When device <local_rank> is already the
//     slot's GPU (a job alone on its agent: slots and local ranks coincide) nothing is set. When it
//     is not (the agent runs other jobs on the lower slots), the list is rotated so that it is:
//     two jobs never both pick the first GPU. A local rank beyond the GPUs sets nothing (the
//     script's set_device fails there as under horovodrun).
bool CudaVisibleDevicesFor(const std::vector<std::string>& gpus, int slot, int local_rank,
                           bool isolate, std::string* value);

}  // namespace hvd::agent
