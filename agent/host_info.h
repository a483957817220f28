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

}  // namespace hvd::agent
