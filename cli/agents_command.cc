// `hvdrun agents`: the agents registered with the launcher, their slots and liveness.
#include <cstdio>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/job_format.h"
#include "control/grpc_util.h"
#include "hvd/v1/launcher.pb.h"

namespace hvd::cli {

int AgentsCommand(int argc, char** argv, int first) {
  control::FlagSet flags("hvdrun agents");
  ClusterFlags cluster;
  bool json = false, help = false;
  cluster.Register(&flags);
  flags.Bool("--json", &json, "print the launcher's answer as JSON");
  std::vector<std::string> args;
  if (int rc = ParseCommandFlags(&flags, &help, argc, argv, first, "[flags]", 0, 0, &args);
      rc >= 0) {
    return rc;
  }
  std::unique_ptr<Client> client;
  Status s = cluster.Connect(&client);
  if (!s.ok()) return ReportError(s);
  std::vector<v1::AgentInfo> agents;
  s = client->ListAgents(&agents);
  if (!s.ok()) return ReportError(s, kExitError);
  if (json) {
    v1::ListAgentsResponse resp;
    resp.mutable_agents()->Assign(agents.begin(), agents.end());
    PrintJson(resp);
  } else if (agents.empty()) {
    std::printf("no agents registered with the launcher at %s; start hvd-agent on each host\n",
                client->address().c_str());
  } else {
    std::fputs(AgentTable(agents, control::NowMs()).c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace hvd::cli
