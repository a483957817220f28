// JobManager::OnAgentReports: a stream's queued reports under one acquisition of the lock
// (agent_inbox.h says who queues them and why).
#include <type_traits>

#include "base/logging.h"
#include "launcherd/job_manager.h"

namespace hvd::launcherd {

size_t JobManager::OnAgentReports(const std::string& agent_id, const AgentLink* link,
                                  std::vector<AgentReport> batch) {
  base::MutexLock lock(&mu_);
  // One scheduling pass for the batch, not one per report: a pass walks the pending jobs and the
  // agents' busy slots, and at 1,000 agents with 100 jobs pending one per rank event took all of
  // the launcher's time (issue 22). ScheduleLocked only notes the request while scheduling_ is set.
  scheduling_ = true;
  reschedule_ = false;
  size_t i = 0;
  for (; i < batch.size(); ++i) {
    // Checked before each report, not once: the agent may re-register on a new stream while this
    // batch is applied (the registry does not take this lock). A superseded stream's reports are
    // stale: the agent sends its unacknowledged rank events again on the new stream, then a
    // heartbeat that says what still runs (OnAgentRegistered).
    if (agents_->Link(agent_id).get() != link) {
      HVD_LOG(DEBUG) << "agent " << agent_id << ": " << batch.size() - i
                     << " report(s) from a superseded stream dropped";
      break;
    }
    std::visit(
        [&](auto& r) HVD_REQUIRES(mu_) {
          using T = std::decay_t<decltype(r)>;
          if constexpr (std::is_same_v<T, HeartbeatReport>) {
            OnHeartbeatLocked(agent_id, r.running_jobs);
          } else if constexpr (std::is_same_v<T, RankEventReport>) {
            OnRankEventLocked(agent_id, r);
          } else if constexpr (std::is_same_v<T, OutputReport>) {
            OnOutputLocked(agent_id, r.job_id, std::move(r.lines));
          } else {
            static_assert(std::is_same_v<T, MasterPortAnswer>);
            OnMasterPortLocked(agent_id, r);
          }
        },
        batch[i]);
  }
  scheduling_ = false;
  if (reschedule_) ScheduleLocked();
  return i;
}

}  // namespace hvd::launcherd
