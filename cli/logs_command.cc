// `hvdrun logs JOB [-f]`: a job's output so far, tagged by rank as an attached run prints it.
// With -f it follows the job to its end and exits with the job's exit code, like an attached run
// (but Ctrl-C only stops following; the job runs on).
#include <atomic>
#include <cstdio>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/follow.h"
#include "cli/job_format.h"
#include "cli/signals.h"

namespace hvd::cli {

int LogsCommand(int argc, char** argv, int first) {
  control::FlagSet flags("hvdrun logs");
  ClusterFlags cluster;
  bool follow = false, verbose = false, help = false;
  cluster.Register(&flags);
  flags.Bool("--follow,-f", &follow, "keep printing until the job ends");
  flags.Bool("--verbose,-v", &verbose, "also show progress and state changes");
  std::vector<std::string> args;
  if (int rc = ParseCommandFlags(&flags, &help, argc, argv, first, "[flags] JOB", 1, 1, &args);
      rc >= 0) {
    return rc;
  }
  std::unique_ptr<Client> client;
  Status s = cluster.Connect(&client);
  if (!s.ok()) return ReportError(s);
  std::unique_ptr<OutputSink> sink;
  s = OutputSink::Create("", stdout, stderr, &sink);
  if (!s.ok()) return ReportError(s);
  // Ctrl-C stops following without cancelling: the job is not this command's.
  std::atomic<int> signo{0};
  std::unique_ptr<SignalWatcher> signals;
  s = SignalWatcher::Start(
      [&](int sig, int) {
        signo = sig;
        client->InterruptWatches();
      },
      &signals);
  if (!s.ok()) return ReportError(s);
  FollowOptions fo;
  fo.follow = follow;
  fo.verbose = verbose;
  FollowResult result;
  s = FollowJob(client.get(), args[0], sink.get(), fo, &result);
  signals.reset();
  if (signo != 0) return ExitCodeForSignal(signo);
  if (!s.ok()) return ReportError(s, kExitError);
  if (!follow || !result.ended) return kExitOk;
  std::fputs(FailureSummary(result.status).c_str(), stderr);
  return JobExitCode(result.status);
}

}  // namespace hvd::cli
