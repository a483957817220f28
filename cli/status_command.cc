// `hvdrun status [JOB]`: one job in detail (state, reason, failure, every rank), or without JOB
// the cluster at a glance (agents, slots, jobs by state).
#include <cstdio>
#include <map>

#include "base/clock.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/job_format.h"
#include "control/status_json.h"

namespace hvd::cli {
namespace {

int ClusterSummary(Client* client, bool json) {
  std::vector<control::AgentInfo> agents;
  std::vector<control::JobStatus> jobs;
  Status s = client->ListAgents(&agents);
  if (s.ok()) s = client->ListJobs(&jobs);
  if (!s.ok()) return ReportError(s, kExitError);
  if (json) {
    // One document: GET /v1/agents and GET /v1/jobs side by side, with the launcher asked.
    nlohmann::json out = {{"launcher", client->address()},
                          {"agents", control::AgentListJson(agents)["agents"]},
                          {"jobs", control::JobListJson(jobs)["jobs"]}};
    std::fputs(control::JsonText(out).c_str(), stdout);
    return kExitOk;
  }
  int ready = 0, slots = 0, used = 0;
  for (const control::AgentInfo& a : agents) {
    if (a.state == "READY") {
      ++ready;
      slots += a.slots;
      used += a.slots_in_use;
    }
  }
  std::map<std::string, int> by_state;
  for (const control::JobStatus& j : jobs) ++by_state[JobStateText(j.state)];
  std::string states;
  for (const auto& [name, n] : by_state) {
    states += (states.empty() ? "" : ", ") + std::to_string(n) + " " + name;
  }
  std::printf(
      "launcher: %s\nagents:   %d ready of %zu\nslots:    %d in use of %d\n"
      "jobs:     %s\n",
      client->address().c_str(), ready, agents.size(), used, slots,
      states.empty() ? "none" : states.c_str());
  return kExitOk;
}

}  // namespace

int StatusCommand(int argc, char** argv, int first) {
  control::FlagSet flags("hvdrun status");
  ClusterFlags cluster;
  bool json = false, help = false;
  cluster.Register(&flags);
  flags.Bool("--json", &json,
             "print JSON, the shape of the launcher's REST answer (GET /v1/jobs/JOB)");
  std::vector<std::string> args;
  if (int rc = ParseCommandFlags(&flags, &help, argc, argv, first, "[flags] [JOB]", 0, 1, &args);
      rc >= 0) {
    return rc;
  }
  std::unique_ptr<Client> client;
  Status s = cluster.Connect(&client);
  if (!s.ok()) return ReportError(s);
  if (args.empty()) return ClusterSummary(client.get(), json);
  control::JobStatus st;
  s = client->GetJob(args[0], &st);
  if (!s.ok()) return ReportError(s, kExitError);
  if (json) {
    std::fputs(control::JsonText(control::JobJson(st, /*full=*/true)).c_str(), stdout);
  } else {
    std::fputs(JobDetail(st, base::WallMs()).c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace hvd::cli
