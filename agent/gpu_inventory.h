// The GPUs of this host, for slots and CUDA_VISIBLE_DEVICES. Three sources, first that answers:
//   NVML      - libnvidia-ml.so.1 loaded with dlopen (never linked: the agent runs on hosts
//               without a driver): index, name, UUID, memory;
//   nvidia-smi - its CSV query, bounded by a deadline (a wedged driver must not hang the agent);
//   /dev      - the /dev/nvidiaN device nodes, a count only.
// None answering means no GPU; why each source did not answer is kept for the agent's log.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "hvd/status.h"

namespace hvd::agent {

struct GpuInfo {
  int index = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"; "" when the source does not say
  std::string uuid;
  uint64_t memory_bytes = 0;
};

struct GpuInventory {
  std::vector<GpuInfo> gpus;
  std::string source;  // "NVML", "nvidia-smi", "/dev" or "none"
  std::string notes;   // why earlier sources gave nothing: "NVML: libnvidia-ml.so.1 not found; ..."

  // "2 GPU(s) from NVML: NVIDIA H100 80GB HBM3 (80 GiB), ..." or "no GPU (NVML: ...)".
  std::string Describe() const;
};

GpuInventory DiscoverGpus(std::chrono::milliseconds smi_deadline = std::chrono::seconds(5));

// One source each (for tests and for DiscoverGpus). Unavailable says why the source gave nothing.
Status GpusFromNvml(const std::string& library, std::vector<GpuInfo>* out);
Status GpusFromNvidiaSmi(const std::string& program, std::chrono::milliseconds deadline,
                         std::vector<GpuInfo>* out);

// `nvidia-smi --query-gpu=index,name,uuid,memory.total --format=csv,noheader,nounits` output
// (memory in MiB). InvalidArgument naming the line when it is not that.
Status ParseNvidiaSmiCsv(const std::string& csv, std::vector<GpuInfo>* out);

}  // namespace hvd::agent
