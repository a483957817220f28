// JobManager: the network check between a placed job's hosts before its ranks start
// (network_check.h). Kept apart from placement and state changes so that each file stays about
// one thing.
#include "launcherd/job_manager.h"
#include "launcherd/network_check.h"

namespace hvd::launcherd {

bool JobManager::NetworkReadyLocked(Job& job, const control::PlacementResult& placement) {
  if (options_.network == nullptr) return true;
  control::NetworkReport report;
  std::string message;
  switch (options_.network->Check(job.status.id, job.status.spec.network_interfaces,
                                  placement.ranks, &report, &message)) {
    case NetworkCheck::Verdict::kReady:
      job.status.network = report;
      if (report.decided) job.log.AddProgress("network: " + report.summary);
      return true;
    case NetworkCheck::Verdict::kWait:
      if (job.status.reason != message) {  // PENDING with this reason: hvdrun -v shows it
        job.status.reason = message;
        ChangedLocked(job, /*marker=*/true);
      }
      return false;
    case NetworkCheck::Verdict::kFail: {
      job.status.network = report;
      job.log.AddProgress("network: " + message);
      JobFailure f;
      f.message = "network check failed: " + message;
      FailLocked(job, f, control::kGenericFailureExitCode);
      return false;
    }
  }
  return false;
}

}  // namespace hvd::launcherd
