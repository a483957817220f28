#include "control/worker_env.h"

#include <array>

namespace hvd::control {
namespace {

// Set per rank by the launcher; a job may not override them (ValidateJobEnv).
constexpr std::array<const char*, 16> kReserved = {
    "HVD_RANK",           "HVD_SIZE",           "HVD_LOCAL_RANK",     "HVD_LOCAL_SIZE",
    "HVD_CROSS_RANK",     "HVD_CROSS_SIZE",     "HOROVOD_RANK",       "HOROVOD_SIZE",
    "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE",
    "HVD_RENDEZVOUS",     "HVD_JOB_ID",         "HVD_ATTEMPT",        "HVD_JOB_SECRET",
};

}  // namespace

std::map<std::string, std::string> WorkerEnv(const WorkerEnvInput& in) {
  std::map<std::string, std::string> env;
  const RankSlot& p = in.placement;
  const std::pair<const char*, int> numbers[] = {
      {"RANK", p.rank},
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
  env["HVD_RENDEZVOUS"] = "hvd://" + in.rendezvous_address;
  env["HVD_JOB_ID"] = in.job_id;
  env["HVD_ATTEMPT"] = std::to_string(in.attempt);
  env["HVD_JOB_SECRET"] = in.job_secret;
  // The placement host, so the runtime's own host grouping agrees with the local ranks above.
  env["HVD_HOSTNAME"] = p.host;
  env["HOROVOD_HOSTNAME"] = p.host;
  if (!in.advertise_addr.empty()) env["HVD_ADVERTISE_ADDR"] = in.advertise_addr;
  if (!in.iface.empty()) {
    env["HVD_IFACE"] = in.iface;
    // "=" makes NCCL match the name exactly ("eth1" alone would also match eth10).
    env["NCCL_SOCKET_IFNAME"] = "=" + in.iface;
  }
  for (const auto& [name, value] : in.job_env) env[name] = value;
  return env;
}

Status ValidateJobEnv(const std::map<std::string, std::string>& job_env) {
  for (const auto& [name, value] : job_env) {
    if (name.empty() || name.find('=') != std::string::npos) {
      return InvalidArgument("environment variable name '" + name +
                             "' is invalid; pass -x NAME=VALUE with a non-empty NAME");
    }
    for (const char* reserved : kReserved) {
      if (name == reserved) {
        return InvalidArgument(name +
                               " is set by the launcher for each rank and cannot be given "
                               "with -x; remove it (use -np and -H to shape the job)");
      }
    }
  }
  return Status::OK();
}

}  // namespace hvd::control
