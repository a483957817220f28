// `hvdrun cancel JOB`: end a job; the launcher stops its ranks (SIGTERM, then SIGKILL after the
// grace). Prints the job's state after the request.
#include <cstdio>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/job_format.h"

namespace hvd::cli {

int CancelCommand(int argc, char** argv, int first) {
  control::FlagSet flags("hvdrun cancel");
  ClusterFlags cluster;
  std::string reason = "by hvdrun cancel";
  bool help = false;
  cluster.Register(&flags);
  flags.String("--reason", &reason, "why, recorded with the job");
  std::vector<std::string> args;
  if (int rc = ParseCommandFlags(&flags, &help, argc, argv, first, "[flags] JOB", 1, 1, &args);
      rc >= 0) {
    return rc;
  }
  std::unique_ptr<Client> client;
  Status s = cluster.Connect(&client);
  if (!s.ok()) return ReportError(s);
  control::JobState state = control::JobState::kUnspecified;
  s = client->Cancel(args[0], reason, &state);
  if (!s.ok()) return ReportError(s, kExitError);
  // Succeeded or failed: it had ended before the cancel came, which then changed nothing.
  const bool ended = state == control::JobState::kSucceeded || state == control::JobState::kFailed;
  std::printf("job %s: %s%s\n", args[0].c_str(), JobStateText(state),
              ended ? " (it had ended already: nothing to cancel)" : "");
  return kExitOk;
}

}  // namespace hvd::cli
