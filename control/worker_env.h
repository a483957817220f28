// The environment of one worker process: who it is (rank numbers in hvd's, Horovod's and
// torchrun's names), where it meets the others (the launcher's rendezvous endpoint and its job's
// secret; torch.distributed's MASTER_ADDR/MASTER_PORT), and the job's own variables (-x). Pure:
// the launcher sends the map in StartRank; the agent adds only CUDA_VISIBLE_DEVICES, where it must
// (docs/gpu.md). The names match runtime/core/context.cc and docs/configuration.md ("Worker
// environment").
//
// torchrun's contract (torch/distributed/elastic/agent/server/local_elastic_agent.py, PyTorch
// 1.13, and https://pytorch.org/docs/stable/elastic/run.html "Environment Variables"), so that a
// program written for torchrun (init_process_group with the default env:// method) runs unchanged:
//   RANK, WORLD_SIZE              = hvd's rank and size
//   LOCAL_RANK, LOCAL_WORLD_SIZE  = hvd's local rank and local size
//   GROUP_RANK, GROUP_WORLD_SIZE  = the index of the rank's host (a torchrun "node") among the
//                                   job's hosts in order of their first rank, and their number
//   ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME = RANK, WORLD_SIZE, "default" (torchrun has one role)
//   MASTER_ADDR, MASTER_PORT      = rank 0's address as the other ranks reach it (127.0.0.1 when
//                                   every rank is on one agent) and a free port there that rank 0's
//                                   agent chose (launcherd/job_master_port.cc)
//   TORCHELASTIC_RESTART_COUNT    = HVD_ATTEMPT (0 on the first run, +1 per --max-restarts retry)
//   TORCHELASTIC_MAX_RESTARTS     = the job's --max-restarts
//   TORCHELASTIC_RUN_ID           = the job id
//   TORCHELASTIC_USE_AGENT_STORE  = "False": no agent hosts a store; rank 0's init_process_group
//                                   creates it at MASTER_ADDR:MASTER_PORT, as under torchrun's
//                                   default c10d rendezvous
//   NCCL_ASYNC_ERROR_HANDLING     = "1" unless the job sets it (WorkerDefaults), as torchrun: a
//                                   failed NCCL collective ends the rank instead of hanging it
// Not set, on purpose: OMP_NUM_THREADS (torchrun forces 1 when it starts several ranks per node;
// hvd leaves threads to the program and to -x OMP_NUM_THREADS=1), TORCHELASTIC_ERROR_FILE (hvd
// reports a failing rank's exit code and stderr tail instead of torchrun's error files).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "control/placement.h"
#include "hvd/status.h"

namespace hvd::control {

struct WorkerEnvInput {
  RankSlot placement;
  int size = 0;                    // np
  std::string rendezvous_address;  // "host:port" of the launcher's rendezvous TCP endpoint
  bool rendezvous_tls = false;  // it speaks TLS: HVD_RENDEZVOUS=hvds://... (the agent adds the CA)
  std::string job_id;
  int attempt = 0;
  int max_restarts = 0;
  std::string job_secret;
  std::string advertise_addr;  // the agent's address, which peers dial to reach this rank
  std::string iface;           // the interface holding it, when the launcher chose it
  // torchrun's node numbers (NodeGroups) and rendezvous; master_port 0: MASTER_PORT is not set.
  int group_rank = 0;
  int group_world_size = 1;
  std::string master_addr;
  int master_port = 0;
  std::map<std::string, std::string> job_env;  // -x NAME=VALUE
  // An elastic job's worker (--min-np/--max-np): HVD_ELASTIC, HVD_WORKER_ID (its rank here),
  // HVD_ELASTIC_TIMEOUT_SECONDS, HVD_ELASTIC_RESET_LIMIT.
  bool elastic = false;
  int64_t elastic_timeout_ms = 0;
  int reset_limit = 0;
  // A worker added to a running elastic job: its rank in the generation it joins (HVD_RANK,
  // RANK); -1: placement.rank, which is also its worker id.
  int elastic_rank = -1;
};

// Every variable the worker needs, with the job's -x variables on top of the launcher's own
// (HVD_HOSTNAME, HVD_ADVERTISE_ADDR, HVD_LOG_LEVEL, MASTER_ADDR, MASTER_PORT... may be overridden
// that way; the identity variables may not, see ValidateJobEnv), and WorkerDefaults() under them.
std::map<std::string, std::string> WorkerEnv(const WorkerEnvInput& in);

// Variables every rank gets unless the job sets them: PYTHONUNBUFFERED=1 (a Python rank's prints
// reach hvdrun's output as they happen, not when a 8 KiB buffer fills or the rank exits) and
// NCCL_ASYNC_ERROR_HANDLING=1 (torchrun's). hvdrun puts a user's own value of these, from its
// environment, into the job (cli/job_options.cc), so that "set by the user" wins in every mode.
const std::map<std::string, std::string>& WorkerDefaults();

// torchrun's GROUP_RANK of each rank (`ranks` in rank order): the index of its host among the
// hosts in order of their first rank. *groups: the number of hosts (GROUP_WORLD_SIZE).
std::vector<int> NodeGroups(const std::vector<RankSlot>& ranks, int* groups);

// Whether the launcher sets `name` per rank, so a job may not (ValidateJobEnv): a client that
// forwards its whole environment must leave these out.
bool IsLauncherVariable(const std::string& name);

// Refuses -x variables that would give ranks a different identity or rendezvous than placement
// decided (HVD_RANK, HOROVOD_SIZE, HVD_JOB_SECRET, RANK, WORLD_SIZE...): a job whose ranks
// disagree on those hangs or mixes with another job. Also refuses empty or '='-containing names.
Status ValidateJobEnv(const std::map<std::string, std::string>& job_env);

}  // namespace hvd::control
