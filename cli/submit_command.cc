// `hvdrun submit [flags] -np N PROGRAM [ARGS...]`: start a job on the cluster and return at once,
// printing its id (for `status`, `logs -f`, `cancel`). The job is detached: it runs on whether or
// not anyone watches it.
#include <cstdio>

#include "cli/client.h"
#include "cli/cluster_hosts.h"
#include "cli/commands.h"
#include "cli/forward_env.h"
#include "cli/job_options.h"

namespace hvd::cli {

int SubmitCommand(int argc, char** argv, int first) {
  control::FlagSet flags("hvdrun submit");
  JobFlags job;
  ClusterFlags cluster;
  bool help = false;
  job.Register(&flags);
  cluster.Register(&flags);
  flags.Bool("--help,-h", &help, "show this help");
  std::vector<std::string> program;
  Status s = flags.Parse(argc, argv, first, /*stop_at_positional=*/true, &program);
  if (!s.ok()) return ReportError(s, kExitUsage);
  if (help) {
    std::fputs(flags.Usage("[flags] -np N PROGRAM [ARGS...]").c_str(), stdout);
    return kExitOk;
  }
  if (!cluster.HasLauncher()) {
    // A detached job needs a launcher that outlives this command; an embedded one would not.
    return ReportError(InvalidArgument("submit needs a cluster: pass --launcher HOST:PORT (or "
                                       "set HVD_LAUNCHER); to run here, use hvdrun without submit"),
                       kExitUsage);
  }
  control::JobSpec spec;
  s = BuildJobSpec(job, program, HostEnvironment::Current(), ProgramCheck::kWhenLocal, &spec);
  if (!s.ok()) return ReportError(s, kExitUsage);
  // The ranks start under the cluster's agents: give them this environment (cli/forward_env.h).
  ForwardEnvironmentToJob(&spec);
  const std::string localhost_note = LocalhostToHostName(&spec);
  if (!localhost_note.empty()) std::fprintf(stderr, "%s\n", localhost_note.c_str());
  for (const std::string& note : JobNotes(job)) {
    std::fprintf(stderr, "hvdrun: %s\n", note.c_str());
  }
  spec.detached = true;
  std::unique_ptr<Client> client;
  s = cluster.Connect(&client);
  if (!s.ok()) return ReportError(s);
  std::string job_id;
  s = client->Submit(spec, &job_id);
  if (!s.ok()) return ReportError(s, kExitError);
  std::printf("%s\n", job_id.c_str());
  return kExitOk;
}

}  // namespace hvd::cli
