// `hvdrun list`: every job the launcher knows, one row each.
#include <cstdio>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/job_format.h"
#include "control/grpc_util.h"
#include "hvd/v1/launcher.pb.h"

namespace hvd::cli {

int ListCommand(int argc, char** argv, int first) {
  control::FlagSet flags("hvdrun list");
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
  std::vector<v1::JobStatus> jobs;
  s = client->ListJobs(&jobs);
  if (!s.ok()) return ReportError(s, kExitError);
  if (json) {
    v1::ListJobsResponse resp;
    resp.mutable_jobs()->Assign(jobs.begin(), jobs.end());
    PrintJson(resp);
  } else if (jobs.empty()) {
    std::printf("no jobs\n");
  } else {
    std::fputs(JobTable(jobs, control::NowMs()).c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace hvd::cli
