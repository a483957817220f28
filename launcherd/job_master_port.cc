// Scheduler, step 3: MASTER_PORT, torchrun's rendezvous port (control/worker_env.h). Before a
// placed job's ranks start, the agent of rank 0 chooses a port free on its host
// (agent/master_port.h) and every rank gets it; MASTER_ADDR is set with the rest of the
// environment at the start. Like the network check it runs between placement and start, never
// blocks (the request is queued on the agent's link), and has a deadline (kept by the supervisor,
// job_supervision.cc) that fails the job naming the agent. A job that gives -x MASTER_PORT skips
// it: its own store, its own port. A request whose agent went away, or whose placement was given
// up for waiting, is dropped and asked afresh for the next placement: only an agent that is there
// and silent fails the job.
#include "base/logging.h"
#include "control/token.h"
#include "launcherd/job_scheduler.h"

namespace hvd::launcherd {
namespace {

// An answer not used within this long is asked again: the job waited for slots meanwhile, and
// the port may have been taken since.
constexpr auto kAnswerFresh = std::chrono::seconds(30);

}  // namespace

Scheduler::Step Scheduler::MasterPortStep(Job& job, Instant now) {
  Job::MasterPortAsk& ask = job.placing->master_port;
  const control::PlacementResult& placement = job.placing->placement;
  if (options_.master_port_timeout.count() <= 0 || placement.ranks.empty() ||
      job.status.spec.env.count("MASTER_PORT")) {
    ask = Job::MasterPortAsk();
    return Step::kReady;
  }
  const control::RankSlot& zero = placement.ranks.front();
  if (!ask.request_id.empty() && ask.attempt == job.status.attempt &&
      ask.agent_id == zero.agent_id) {
    if (ask.port > 0 && now.steady - ask.answered < kAnswerFresh) return Step::kReady;
    if (!ask.error.empty()) {
      JobFailure f;
      f.host = ask.host;
      f.message = "rank 0's agent on " + ask.host + " could not choose MASTER_PORT: " + ask.error;
      ask = Job::MasterPortAsk();
      job.Fail(f, control::kGenericFailureExitCode, now);
      return Step::kFailed;
    }
    if (ask.port == 0) return Step::kWait;  // still asking; the supervisor keeps the deadline
  }
  ask = Job::MasterPortAsk();
  ask.request_id = control::RandomHex(4);
  ask.attempt = job.status.attempt;
  ask.agent_id = zero.agent_id;
  ask.host = zero.host;
  ask.deadline = now.steady + options_.master_port_timeout;
  std::shared_ptr<AgentLink> link = agents_->Link(zero.agent_id);
  if (!link || !link->SendMasterPort({ask.request_id, job.id()})) {
    JobFailure f;
    f.host = zero.host;
    f.message = "rank 0's agent " + zero.agent_id + " on " + zero.host +
                " disconnected before it chose MASTER_PORT";
    ask = Job::MasterPortAsk();
    job.Fail(f, control::kGenericFailureExitCode, now);
    return Step::kFailed;
  }
  const std::string reason = "choosing MASTER_PORT on " + zero.host;
  if (job.status.reason != reason) {
    job.status.reason = reason;
    job.Changed(/*marker=*/true);
  }
  return Step::kWait;
}

Scheduler::Answer Scheduler::OnMasterPort(Job& job, const std::string& agent_id,
                                          const MasterPortAnswer& answer, Instant now) const {
  if (!job.placing) return Answer::kNotThisJob;
  Job::MasterPortAsk& ask = job.placing->master_port;
  if (ask.request_id != answer.request_id || ask.agent_id != agent_id) return Answer::kNotThisJob;
  if (job.state() != JobState::kPending || ask.port > 0 || !ask.error.empty()) {
    return Answer::kIgnored;
  }
  if (answer.port > 0 && answer.port <= 65535 && answer.error.empty()) {
    ask.port = answer.port;
    ask.answered = now.steady;
    HVD_LOG(INFO) << "job " << job.id() << ": MASTER_PORT " << ask.port << " on " << ask.host;
  } else {
    ask.error =
        answer.error.empty() ? "it answered port " + std::to_string(answer.port) : answer.error;
  }
  return Answer::kTaken;
}

}  // namespace hvd::launcherd
