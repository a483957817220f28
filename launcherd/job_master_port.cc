// JobManager: MASTER_PORT, torchrun's rendezvous port (control/worker_env.h). Before a placed
// job's ranks start, the agent of rank 0 chooses a port free on its host (agent/master_port.h)
// and every rank gets it; MASTER_ADDR is set with the rest of the environment in StartLocked.
// Like the network check it runs between placement and start, never blocks under the lock (the
// request is queued on the agent's link), and has a deadline that fails the job naming the agent.
// A job that gives -x MASTER_PORT skips it: its own store, its own port. A request whose agent
// went away, or whose placement was given up for waiting (job_manager.cc), is dropped and asked
// afresh for the next placement: only an agent that is there and silent fails the job.
#include <cstdio>

#include "common/logging.h"
#include "control/duration_text.h"
#include "control/token.h"
#include "launcherd/job_manager.h"

namespace hvd::launcherd {
namespace {

// An answer not used within this long is asked again: the job waited for slots meanwhile, and
// the port may have been taken since.
constexpr auto kAnswerFresh = std::chrono::seconds(30);

std::string Seconds(std::chrono::milliseconds d) {
  return control::SecondsText(d);
}

}  // namespace

bool JobManager::MasterPortReadyLocked(Job& job, const control::PlacementResult& placement) {
  Job::MasterPortAsk& ask = job.master_port;
  if (options_.master_port_timeout.count() <= 0 || placement.ranks.empty() ||
      job.status.spec.env.count("MASTER_PORT")) {
    ask = Job::MasterPortAsk();
    return true;
  }
  const control::RankSlot& zero = placement.ranks.front();
  const auto now = Clock::now();
  if (!ask.request_id.empty() && ask.attempt == job.status.attempt &&
      ask.agent_id == zero.agent_id) {
    if (ask.port > 0 && now - ask.answered < kAnswerFresh) return true;
    if (!ask.error.empty()) {
      JobFailure f;
      f.host = ask.host;
      f.message = "rank 0's agent on " + ask.host + " could not choose MASTER_PORT: " + ask.error;
      ask = Job::MasterPortAsk();
      FailLocked(job, f, control::kGenericFailureExitCode);
      return false;
    }
    if (ask.port == 0) return false;  // still asking; CheckMasterPortLocked keeps the deadline
  }
  ask = Job::MasterPortAsk();
  ask.request_id = control::RandomHex(4);
  ask.attempt = job.status.attempt;
  ask.agent_id = zero.agent_id;
  ask.host = zero.host;
  ask.deadline = now + options_.master_port_timeout;
  std::shared_ptr<AgentLink> link = agents_->Link(zero.agent_id);
  if (!link || !link->SendMasterPort({ask.request_id, job.status.id})) {
    JobFailure f;
    f.host = zero.host;
    f.message = "rank 0's agent " + zero.agent_id + " on " + zero.host +
                " disconnected before it chose MASTER_PORT";
    ask = Job::MasterPortAsk();
    FailLocked(job, f, control::kGenericFailureExitCode);
    return false;
  }
  const std::string reason = "choosing MASTER_PORT on " + zero.host;
  if (job.status.reason != reason) {
    job.status.reason = reason;
    ChangedLocked(job, /*marker=*/true);
  }
  return false;
}

void JobManager::OnMasterPort(const std::string& agent_id, const MasterPortAnswer& answer) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const JobPtr& job : jobs_) {
    Job::MasterPortAsk& ask = job->master_port;
    if (ask.request_id != answer.request_id || ask.agent_id != agent_id) continue;
    if (job->status.state != JobState::kPending || ask.port > 0 || !ask.error.empty()) return;
    if (answer.port > 0 && answer.port <= 65535 && answer.error.empty()) {
      ask.port = answer.port;
      ask.answered = Clock::now();
      HVD_LOG(INFO) << "job " << job->status.id << ": MASTER_PORT " << ask.port << " on "
                    << ask.host;
    } else {
      ask.error =
          answer.error.empty() ? "it answered port " + std::to_string(answer.port) : answer.error;
    }
    ScheduleLocked();  // starts the job, or fails it with the agent's error
    return;
  }
}

void JobManager::CheckMasterPortLocked(Job& job, Clock::time_point now) {
  Job::MasterPortAsk& ask = job.master_port;
  if (ask.request_id.empty() || ask.port > 0 || !ask.error.empty()) return;
  if (!agents_->Link(ask.agent_id)) {
    // Rank 0's agent went away after it was asked: its answer will never come, and that is no
    // silence to blame it for. Place the job again: elsewhere (asked afresh), back to waiting for
    // slots, or on the same agent once it is back.
    ask = Job::MasterPortAsk();
    ScheduleLocked();
    return;
  }
  if (now < ask.deadline) return;
  JobFailure f;
  f.host = ask.host;
  f.message = "rank 0's agent " + ask.agent_id + " on " + ask.host +
              " did not choose MASTER_PORT within " + Seconds(options_.master_port_timeout) +
              " (stuck, or older than the launcher? update it, or pass -x MASTER_PORT=N)";
  ask = Job::MasterPortAsk();
  FailLocked(job, f, control::kGenericFailureExitCode);
}

}  // namespace hvd::launcherd
