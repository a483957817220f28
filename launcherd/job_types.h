// The launcher's domain types: what JobManager and AgentRegistry work with. The job model it
// shares with hvdrun is control/job_model.h; what only the launcher needs (an agent's rank
// reports, the commands it sends agents) is here. The gRPC services translate hvd.v1 messages to
// and from these (proto_convert.h), so the logic never sees protobuf.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "control/job_model.h"
#include "control/job_state.h"
#include "control/placement.h"

namespace hvd::launcherd {

using control::JobState;
using control::RankState;

// The job model hvdrun shares (control/job_model.h), under the names the launcher has always used.
using control::AgentInfo;
using control::AnyRankLive;
using control::JobEvent;
using control::JobFailure;
using control::JobSpec;
using control::JobStatus;
using control::OutputLine;
using control::RankList;
using control::RankLive;
using control::RankStatus;

// A spec's limit in milliseconds, or `fallback` (the launcher's default) when it sets none (-1).
inline std::chrono::milliseconds OrDefault(int64_t ms, std::chrono::milliseconds fallback) {
  return ms >= 0 ? std::chrono::milliseconds(ms) : fallback;
}

// What an agent reports about a rank (hvd.v1.RankEvent).
struct RankEventReport {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  RankState state = RankState::kUnspecified;
  int pid = 0;
  int exit_code = 0;
  int signal = 0;
  std::string error;
  std::string stderr_tail;
  int64_t time_ms = 0;  // wall clock when the agent saw it; 0: unknown (an older agent)
  uint64_t seq = 0;     // the agent's number for it (RankEvent.seq); 0: an older agent
};

// Commands to an agent (hvd.v1.StartRank / StopJob).
struct StartRankCommand {
  std::string job_id;
  int attempt = 0;
  control::RankSlot placement;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string working_dir;
  bool forward_stdin = false;  // the rank's stdin comes from AgentGateway.ReadStdin
  std::string run_as;          // JobSpec.run_as
  bool gpu_isolation = false;  // JobSpec.gpu_isolation
};

struct StopJobCommand {
  std::string job_id;
  std::string reason;
  int64_t grace_ms = 0;
  int signal = 0;  // the first signal; 0: SIGTERM (hvd.v1.StopJob.signal)
  // Non-empty: only these ranks of `attempt` (hvd.v1.StopRanks); empty: every rank of the job.
  std::vector<int> ranks = {};
  int attempt = 0;
};

// Asks an agent to send `signal` to the processes of these ranks that catch it: a stalled rank's
// stacks (hvd.v1.StackDump; agent/stack_dump.h).
struct StackDumpCommand {
  std::string job_id;
  int attempt = 0;
  std::vector<int> ranks;
  int signal = 0;
  std::string reason;
};

}  // namespace hvd::launcherd
