// The one JSON shape of jobs and agents, shared by the launcher's REST answers (/v1/jobs,
// /v1/jobs/{id}, /v1/agents) and hvdrun's --json (list, status, agents), so a script written
// against one reads the other. Unlike protobuf's JSON printer every field is present (0, "" and
// false included), 64-bit integers are numbers, enums are their names, and an absent failure or
// undecided network is null. The job's environment (-x) is left out: REST is unauthenticated and
// the values may be secrets.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "control/job_model.h"

namespace hvd::control {

// `full`: with the spec's details, the ranks, the failure and the network (one job: GET
// /v1/jobs/{id}, hvdrun status JOB --json); otherwise the summary a listing shows.
nlohmann::json JobJson(const JobStatus& job, bool full);
nlohmann::json AgentJson(const AgentInfo& agent);
// {"jobs": [summary...]} and {"agents": [...]}.
nlohmann::json JobListJson(const std::vector<JobStatus>& jobs);
nlohmann::json AgentListJson(const std::vector<AgentInfo>& agents);

// Indented text ending in a newline; invalid UTF-8 (process output can be anything) is replaced
// rather than thrown on.
std::string JsonText(const nlohmann::json& value);

}  // namespace hvd::control
