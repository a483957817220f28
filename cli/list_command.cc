// `hvdrun list` (every job the launcher knows) and `hvdrun agents` (the agents registered with
// it, their slots and liveness): the same shape, one row per item, or the answer as JSON.
#include <cstdio>

#include "base/clock.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/job_format.h"
#include "control/status_json.h"

namespace hvd::cli {
namespace {

// Fetches items with `fetch`, then prints them as JSON (`to_json`, REST's shape), `empty_text`, or
// `table`.
template <typename Item, typename Fetch, typename ToJson, typename Table>
int Listing(const char* program, int argc, char** argv, int first, Fetch fetch, ToJson to_json,
            Table table, const std::string& empty_text) {
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
    std::fputs(control::JsonText(to_json(items)).c_str(), stdout);
  } else if (items.empty()) {
    std::printf("%s\n", (empty_text.empty() ? std::string("none") : empty_text).c_str());
  } else {
    std::fputs(table(items, base::WallMs()).c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace

int ListCommand(int argc, char** argv, int first) {
  return Listing<control::JobStatus>(
      "hvdrun list", argc, argv, first,
      [](Client& c, std::vector<control::JobStatus>* out) { return c.ListJobs(out); },
      [](const std::vector<control::JobStatus>& jobs) { return control::JobListJson(jobs); },
      [](const std::vector<control::JobStatus>& jobs, int64_t now) { return JobTable(jobs, now); },
      "no jobs");
}

int AgentsCommand(int argc, char** argv, int first) {
  // The launcher's address is only known once connected, so the empty message says where to look.
  return Listing<control::AgentInfo>(
      "hvdrun agents", argc, argv, first,
      [](Client& c, std::vector<control::AgentInfo>* out) { return c.ListAgents(out); },
      [](const std::vector<control::AgentInfo>& agents) { return control::AgentListJson(agents); },
      [](const std::vector<control::AgentInfo>& agents, int64_t now) {
        return AgentTable(agents, now);
      },
      "no agents registered with the launcher; start hvd-agent on each host");
}

}  // namespace hvd::cli
