#include "core/horovod_env.h"

#include <cstring>
#include <map>

#include "base/settings.h"

extern char** environ;

namespace hvd::runtime::core {
namespace {

// What hvd does instead, for the variables Horovod documents.
const std::map<std::string, std::string>& Alternatives() {
  static const std::map<std::string, std::string> m = {
      {"HOROVOD_AUTOTUNE",
       "hvd does not autotune; its defaults were measured (docs/performance.md) and "
       "HVD_FUSION_THRESHOLD / HVD_CYCLE_TIME set them by hand"},
      {"HOROVOD_AUTOTUNE_LOG", "hvd does not autotune (see HOROVOD_AUTOTUNE)"},
      {"HOROVOD_CONTROLLER",
       "hvd has one controller of its own (no MPI or Gloo); ranks meet through HVD_RENDEZVOUS"},
      {"HOROVOD_CPU_OPERATIONS",
       "hvd runs CPU collectives on its own shared-memory and TCP transports"},
      {"HOROVOD_GPU_OPERATIONS", "hvd picks the GPU data path itself (docs/gpu.md)"},
      {"HOROVOD_GPU_ALLREDUCE", "hvd picks the GPU data path itself (docs/gpu.md)"},
      {"HOROVOD_GPU_ALLGATHER", "hvd picks the GPU data path itself (docs/gpu.md)"},
      {"HOROVOD_GPU_BROADCAST", "hvd picks the GPU data path itself (docs/gpu.md)"},
      {"HOROVOD_HIERARCHICAL_ALLGATHER",
       "hvd's allgather is flat; HVD_HIERARCHICAL_ALLREDUCE controls the allreduce"},
      {"HOROVOD_MPI_THREADS_DISABLE", "hvd does not use MPI"},
      {"HOROVOD_NUM_NCCL_STREAMS", "hvd picks the GPU data path itself (docs/gpu.md)"},
      {"HOROVOD_ADASUM_MPI_CHUNK_SIZE", "hvd's Adasum does not use MPI"},
      {"HOROVOD_DISABLE_GROUP_FUSION",
       "hvd fuses grouped allreduces with others as fusion allows; HVD_FUSION_THRESHOLD=0 "
       "disables fusion"},
      {"HOROVOD_ENABLE_XLA_OPS", "hvd has no TensorFlow/XLA binding"},
      {"HOROVOD_GLOO_TIMEOUT_SECONDS",
       "use HVD_START_TIMEOUT_SECONDS and HVD_PEER_TIMEOUT_SECONDS"},
      {"HOROVOD_STALL_CHECK_DISABLE", "set HVD_STALL_CHECK_TIME_SECONDS=0"},
  };
  return m;
}

// Variables hvd reads outside the typed settings, or that launchers set for information only.
bool ReadElsewhere(const std::string& name) {
  static const char* const kKnown[] = {
      "HOROVOD_HOSTNAME",        "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT",
      "HOROVOD_GLOO_IFACE",      "HOROVOD_CROSS_RANK",           "HOROVOD_CROSS_SIZE",
      "HOROVOD_LOCAL_RANK",      "HOROVOD_LOCAL_SIZE",
      "HOROVOD_THREAD_AFFINITY",  // core/thread_affinity.h
  };
  for (const char* k : kKnown) {
    if (name == k) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> UnimplementedHorovodVariables() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "HOROVOD_", 8) != 0) continue;
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    const std::string name(*e, eq - *e);
    bool declared = false;
    for (const base::SettingInfo& s : base::AllSettings()) {
      declared = declared || s.alias == name;
    }
    if (declared || ReadElsewhere(name)) continue;
    const auto it = Alternatives().find(name);
    if (it != Alternatives().end()) {
      out.push_back(name + " is set but hvd does not implement it: " + it->second);
    } else if (name.rfind("HOROVOD_WITH", 0) == 0 || name.rfind("HOROVOD_BUILD", 0) == 0) {
      out.push_back(name + " is one of Horovod's build options; hvd needs none and ignores it");
    } else {
      out.push_back(name +
                    " is set but hvd has no such setting and ignores it "
                    "(docs/configuration.md lists the HOROVOD_* names hvd reads)");
    }
  }
  return out;
}

}  // namespace hvd::runtime::core
