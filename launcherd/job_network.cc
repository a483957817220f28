// Scheduler, step 2: the network check between a placed job's hosts before its ranks start
// (network_check.h). The job keeps its placement through the probe: each pass asks the check
// about that same placement, and the probe's end (NetworkCheck's done callback, which schedules
// again) finds the answer waiting. A placement given up or replaced starts a new probe.
#include "launcherd/job_scheduler.h"
#include "launcherd/network_check.h"

namespace hvd::launcherd {

Scheduler::Step Scheduler::NetworkStep(Job& job, Instant now) {
  if (options_.network == nullptr) return Step::kReady;
  control::NetworkReport report;
  std::string message;
  switch (options_.network->Check(job.id(), job.status.spec.network_interfaces,
                                  job.placing->placement.ranks, &report, &message)) {
    case NetworkCheck::Verdict::kReady:
      job.status.network = report;
      if (report.decided) job.log.AddProgress("network: " + report.summary);
      return Step::kReady;
    case NetworkCheck::Verdict::kWait:
      if (job.status.reason != message) {  // PENDING with this reason: hvdrun -v shows it
        job.status.reason = message;
        job.Changed(/*marker=*/true);
      }
      return Step::kWait;
    case NetworkCheck::Verdict::kFail: {
      job.status.network = report;
      job.log.AddProgress("network: " + message);
      JobFailure f;
      f.message = "network check failed: " + message;
      job.Fail(f, control::kGenericFailureExitCode, now);
      return Step::kFailed;
    }
  }
  return Step::kFailed;
}

}  // namespace hvd::launcherd
