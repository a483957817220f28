// `hvdrun list` (every job the launcher knows) and `hvdrun agents` (the agents registered with
// it, their slots and liveness): the same shape, one row per item, or the answer as JSON.
#include <cstdio>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/job_format.h"
#include "control/grpc_util.h"
#include "control/status_json.h"
#include "hvd/v1/launcher.pb.h"

namespace hvd::cli {
namespace {

// Fetches items with `fetch`, then prints them as JSON (`to_json`, REST's shape), `empty_text`, or
// `table`.
template <typename Item, typename Response, typename Fetch, typename Table, typename Repeated,
          typename ToJson>
int Listing(const char* program, int argc, char** argv, int first, Fetch fetch, Repeated repeated,
            ToJson to_json, Table table, const std::string& empty_text) {
  control::FlagSet flags(program);
  ClusterFlags cluster;
  bool json = false, help = false;
  cluster.Register(&flags);
  flags.Bool("--json", &json, "print JSON, the shape of the launcher's REST answer");
  std::vector<std::string> args;
  if (int rc = ParseCommandFlags(&flags, &help, argc, argv, first, "[flags]", 0, 0, &args);
      rc >= 0) {
    return rc;
  }
  std::unique_ptr<Client> client;
  Status s = cluster.Connect(&client);
  if (!s.ok()) return ReportError(s);
  std::vector<Item> items;
  s = fetch(*client, &items);
  if (!s.ok()) return ReportError(s, kExitError);
  if (json) {
    Response resp;
    repeated(resp)->Assign(items.begin(), items.end());
    std::fputs(control::JsonText(to_json(*repeated(resp))).c_str(), stdout);
  } else if (items.empty()) {
    std::printf("%s\n", (empty_text.empty() ? std::string("none") : empty_text).c_str());
  } else {
    std::fputs(table(items, control::NowMs()).c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace

int ListCommand(int argc, char** argv, int first) {
  return Listing<v1::JobStatus, v1::ListJobsResponse>(
      "hvdrun list", argc, argv, first,
      [](Client& c, std::vector<v1::JobStatus>* out) { return c.ListJobs(out); },
      [](v1::ListJobsResponse& r) { return r.mutable_jobs(); },
      [](const auto& jobs) { return control::JobListJson(jobs); },
      [](const std::vector<v1::JobStatus>& jobs, int64_t now) { return JobTable(jobs, now); },
      "no jobs");
}

int AgentsCommand(int argc, char** argv, int first) {
  // The launcher's address is only known once connected, so the empty message says where to look.
  return Listing<v1::AgentInfo, v1::ListAgentsResponse>(
      "hvdrun agents", argc, argv, first,
      [](Client& c, std::vector<v1::AgentInfo>* out) { return c.ListAgents(out); },
      [](v1::ListAgentsResponse& r) { return r.mutable_agents(); },
      [](const auto& agents) { return control::AgentListJson(agents); },
      [](const std::vector<v1::AgentInfo>& agents, int64_t now) { return AgentTable(agents, now); },
      "no agents registered with the launcher; start hvd-agent on each host");
}

}  // namespace hvd::cli
