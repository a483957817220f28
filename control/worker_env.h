// The environment of one worker process: who it is (rank numbers in hvd's and Horovod's names),
// where it meets the others (the launcher's rendezvous endpoint and its job's secret), and the
// job's own variables (-x). Pure: the launcher sends the map in StartRank; the agent adds only
// CUDA_VISIBLE_DEVICES. The names match runtime/core/context.cc (docs/configuration.md).
#pragma once

#include <map>
#include <string>

#include "control/placement.h"
#include "hvd/status.h"

namespace hvd::control {

struct WorkerEnvInput {
  RankSlot placement;
  int size = 0;                    // np
  std::string rendezvous_address;  // "host:port" of the launcher's rendezvous TCP endpoint
  std::string job_id;
  int attempt = 0;
  std::string job_secret;
  std::string advertise_addr;  // the agent's address, which peers dial to reach this rank
  std::string iface;           // the interface holding it, when the launcher chose it
  std::map<std::string, std::string> job_env;  // -x NAME=VALUE
};

// Every variable the worker needs, with the job's -x variables on top of the launcher's own
// (HVD_HOSTNAME, HVD_ADVERTISE_ADDR, HVD_LOG_LEVEL... may be overridden that way; the identity
// variables may not, see ValidateJobEnv).
std::map<std::string, std::string> WorkerEnv(const WorkerEnvInput& in);

// Refuses -x variables that would give ranks a different identity or rendezvous than placement
// decided (HVD_RANK, HOROVOD_SIZE, HVD_JOB_SECRET...): a job whose ranks disagree on those hangs
// or mixes with another job. Also refuses empty or '='-containing names.
Status ValidateJobEnv(const std::map<std::string, std::string>& job_env);

}  // namespace hvd::control
