// What an agent's stream carries to JobManager, already out of hvd.v1: a heartbeat, a rank event,
// output lines or a MASTER_PORT answer. The AgentGateway queues them per stream (agent_inbox.h) and
// JobManager applies a stream's queue in one go (JobManager::OnAgentReports, job_inbox.cc).
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "launcherd/job_types.h"
#include "launcherd/master_port.h"

namespace hvd::launcherd {

struct HeartbeatReport {
  std::vector<std::string> running_jobs;  // the jobs the agent still runs ranks of
};

struct OutputReport {
  std::string job_id;
  std::vector<OutputLine> lines;
};

using AgentReport = std::variant<HeartbeatReport, RankEventReport, OutputReport, MasterPortAnswer>;

}  // namespace hvd::launcherd
