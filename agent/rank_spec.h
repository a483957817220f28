// A rank as the agent runs it, in plain types: what the launcher's StartRank says, translated once
// by the launcher client (launcher_client.h) and carried from there through Workers down to the
// spawn (RankRunnerOptions); and what the agent reports about it (hvd.v1.RankEvent), translated
// back at the same edge. Nothing below the launcher client sees protobuf.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "control/job_state.h"

namespace hvd::agent {

struct RankSpec {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int slot = 0;                   // the slot on this agent (its GPU index when the agent has GPUs)
  int local_rank = 0;             // the rank's index among its job's ranks on this host
  std::vector<std::string> argv;  // argv[0] is the program; never run through a shell
  std::map<std::string, std::string> env;  // the full worker environment, on top of the agent's
  std::string working_dir;                 // empty: the agent's working directory
  bool forward_stdin = false;  // stdin is a pipe fed from AgentGateway.ReadStdin; else /dev/null
  std::string run_as;          // the user the rank runs as; empty: the agent's own user
  bool gpu_isolation = false;  // CUDA_VISIBLE_DEVICES = the slot's GPU alone (docs/gpu.md)
};

// A rank's state change as the agent reports it to the launcher.
struct RankReport {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  control::RankState state = control::RankState::kUnspecified;  // RUNNING, EXITED, ...
  int pid = 0;
  int exit_code = 0;
  int signal = 0;
  std::string error;
  std::string stderr_tail;
  int64_t time_ms = 0;  // wall clock when the agent saw it; 0: not given
};

}  // namespace hvd::agent
