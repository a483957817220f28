#include "control/worker_env.h"

#include <array>

#include "control/job_model.h"

namespace hvd::control {
namespace {

// Set per rank by the launcher; a job may not override them (ValidateJobEnv). MASTER_ADDR and
// MASTER_PORT are not among them: a job that runs its own store elsewhere may name it. hvd's and
// Horovod's names, then torchrun's.
// clang-format off
constexpr std::array<const char*, 37> kReserved = {
    "HVD_RANK", "HVD_SIZE", "HVD_LOCAL_RANK",
    "HVD_LOCAL_SIZE", "HVD_CROSS_RANK", "HVD_CROSS_SIZE",
    "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK",
    "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE",
    "HVD_RENDEZVOUS", "HVD_JOB_ID", "HVD_ATTEMPT",
    "HVD_JOB_SECRET", "RANK", "WORLD_SIZE",
    "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "HVD_RENDEZVOUS_CA", "HVD_RENDEZVOUS_CRL", "HVD_ELASTIC",
    "HOROVOD_ELASTIC", "HVD_WORKER_ID", "HVD_ELASTIC_TIMEOUT_SECONDS",
    "HVD_ELASTIC_RESET_LIMIT", "HVD_JOB_SECRET_FD", "HVD_JOB_SECRET_FILE",
    "HVD_STACK_DUMP_SIGNAL",
};
// clang-format on

}  // namespace

const std::map<std::string, std::string>& WorkerDefaults() {
  static const auto* defaults = new std::map<std::string, std::string>{
      {"PYTHONUNBUFFERED", "1"},
      {"NCCL_ASYNC_ERROR_HANDLING", "1"},
  };
  return *defaults;
}

std::map<std::string, std::string> WorkerEnv(const WorkerEnvInput& in) {
  std::map<std::string, std::string> env = WorkerDefaults();
  const RankSlot& p = in.placement;
  const int rank = in.elastic_rank >= 0 ? in.elastic_rank : p.rank;
  const std::pair<const char*, int> numbers[] = {
      {"RANK", rank},
      {"SIZE", in.size},
      {"LOCAL_RANK", p.local_rank},
      {"LOCAL_SIZE", p.local_size},
      {"CROSS_RANK", p.cross_rank},
      {"CROSS_SIZE", p.cross_size},
  };
  for (const auto& [name, value] : numbers) {
    env[std::string("HVD_") + name] = std::to_string(value);
    env[std::string("HOROVOD_") + name] = std::to_string(value);
  }
  env["HVD_RENDEZVOUS"] = (in.rendezvous_tls ? "hvds://" : "hvd://") + in.rendezvous_address;
  env["HVD_JOB_ID"] = in.job_id;
  env["HVD_ATTEMPT"] = std::to_string(in.attempt);
  env["HVD_JOB_SECRET"] = in.job_secret;
  // The signal a stalled rank is sent for its stacks (StackDump): hvd.torch registers Python's
  // faulthandler for it.
  env["HVD_STACK_DUMP_SIGNAL"] = std::to_string(kStackDumpSignal);
  // The placement host, so the runtime's own host grouping agrees with the local ranks above.
  env["HVD_HOSTNAME"] = p.host;
  env["HOROVOD_HOSTNAME"] = p.host;
  if (!in.advertise_addr.empty()) env["HVD_ADVERTISE_ADDR"] = in.advertise_addr;
  if (!in.iface.empty()) {
    env["HVD_IFACE"] = in.iface;
    // "=" makes NCCL match the name exactly ("eth1" alone would also match eth10).
    env["NCCL_SOCKET_IFNAME"] = "=" + in.iface;
    // torch's gloo otherwise resolves the host name, which may name an address the other hosts
    // cannot reach (127.0.1.1 in /etc/hosts, or another interface), and falls back to loopback.
    env["GLOO_SOCKET_IFNAME"] = in.iface;
  }

  if (in.elastic) {
    // The runtime joins the launcher's membership by the worker's id (runtime/core/elastic.h);
    // HVD_RANK and HVD_SIZE above are its first generation's and change as workers come and go.
    env["HVD_ELASTIC"] = env["HOROVOD_ELASTIC"] = "1";
    env["HVD_WORKER_ID"] = std::to_string(p.rank);
    // The runtime's own wait outlasts the launcher's, whose failure names what was lost.
    env["HVD_ELASTIC_TIMEOUT_SECONDS"] = std::to_string(in.elastic_timeout_ms / 1000 + 10);
    env["HVD_ELASTIC_RESET_LIMIT"] = std::to_string(in.reset_limit);
  }

  // torchrun's (worker_env.h).
  env["RANK"] = env["ROLE_RANK"] = std::to_string(rank);
  env["WORLD_SIZE"] = env["ROLE_WORLD_SIZE"] = std::to_string(in.size);
  env["LOCAL_RANK"] = std::to_string(p.local_rank);
  env["LOCAL_WORLD_SIZE"] = std::to_string(p.local_size);
  env["GROUP_RANK"] = std::to_string(in.group_rank);
  env["GROUP_WORLD_SIZE"] = std::to_string(in.group_world_size);
  env["ROLE_NAME"] = "default";
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(in.attempt);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(in.max_restarts);
  env["TORCHELASTIC_RUN_ID"] = in.job_id;
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  if (!in.master_addr.empty()) env["MASTER_ADDR"] = in.master_addr;
  if (in.master_port > 0) env["MASTER_PORT"] = std::to_string(in.master_port);

  for (const auto& [name, value] : in.job_env) env[name] = value;
  return env;
}

std::vector<int> NodeGroups(const std::vector<RankSlot>& ranks, int* groups) {
  std::map<std::string, int> index;  // host -> its group, numbered in order of first rank
  std::vector<int> out;
  out.reserve(ranks.size());
  for (const RankSlot& r : ranks) {
    auto it = index.emplace(r.host, static_cast<int>(index.size())).first;
    out.push_back(it->second);
  }
  *groups = static_cast<int>(index.size());
  return out;
}

bool IsLauncherVariable(const std::string& name) {
  for (const char* reserved : kReserved) {
    if (name == reserved) return true;
  }
  return false;
}

Status ValidateJobEnv(const std::map<std::string, std::string>& job_env) {
  for (const auto& [name, value] : job_env) {
    if (name.empty() || name.find('=') != std::string::npos) {
      return InvalidArgument("environment variable name '" + name +
                             "' is invalid; pass -x NAME=VALUE with a non-empty NAME");
    }
    if (IsLauncherVariable(name)) {
      return InvalidArgument(name +
                             " is set by the launcher for each rank and cannot be given "
                             "with -x; remove it (use -np and -H to shape the job)");
    }
  }
  return Status::OK();
}

}  // namespace hvd::control
