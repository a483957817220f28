// Job: which failure is the cause when several come (job.h). A rank that died because a peer did
// is held back for the peer's own failure; an agent whose stream dropped explains the deaths of
// the ranks that talked to its ranks (issue 20, finding 9).
#include "base/logging.h"
#include "control/log_escape.h"
#include "launcherd/job.h"

namespace hvd::launcherd {

void Job::SetCauseTime(int64_t time_ms, bool secondary, Instant now) {
  cause_time_ms_ = time_ms;
  cause_secondary_ = secondary;
  if (time_ms > 0) cause_set_at_ = now.steady;
}

void Job::RankFailed(const JobFailure& f, int exit_code, int64_t time_ms,
                     const AgentConnected& connected, Instant now) {
  // A rank that dies while an agent of its job is out of touch most likely died because its peers
  // there vanished: the agent is the cause, not this rank.
  JobFailure gone;
  if (!terminal() && status.state != JobState::kRestarting &&
      AgentGoneCause("", connected, &gone)) {
    held_.reset();
    Fail(gone, control::kGenericFailureExitCode, now);
    SetCauseTime(0, false, now);  // never replaced by a rank's exit
    return;
  }
  const bool secondary = peer_failed_.count(f.rank) > 0;
  // Which of two rank failures is the cause: one that blamed no peer, then the earlier death.
  auto better = [&](bool other_secondary, int64_t other_time) {
    if (secondary != other_secondary) return !secondary;
    return time_ms > 0 && other_time > 0 && time_ms < other_time;
  };
  if (status.state == JobState::kFailed && status.has_failure && cause_time_ms_ > 0) {
    if (!finished && better(cause_secondary_, cause_time_ms_)) {
      status.failure = secondary ? WithPeerReport(f) : f;
      status.exit_code = exit_code;
      status.reason = status.failure.message;
      SetCauseTime(time_ms, secondary, now);
      Changed(/*marker=*/true);
    }
    return;
  }
  if (terminal() || status.state == JobState::kRestarting) return;
  if (secondary) {
    // It failed because of a peer: wait a moment for that peer's own failure.
    if (!held_ || better(true, held_->time_ms)) {
      if (!held_) settle_at_ = now.steady + rules_.cause_settle;
      held_ = HeldFailure{f, exit_code, time_ms};
    }
    return;  // released by ReleaseHeld: a better failure, every rank gone, or the supervisor
  }
  held_.reset();
  Fail(f, exit_code, now);
  SetCauseTime(time_ms, false, now);
}

void Job::ReleaseHeld(Instant now) {
  if (!held_) return;
  const HeldFailure h = *held_;
  held_.reset();
  JobFailure stalled;
  if (StallCause(h.failure, &stalled)) {
    Fail(stalled, control::kGenericFailureExitCode, now);
  } else {
    Fail(WithPeerReport(h.failure), h.exit_code, now);
  }
  SetCauseTime(h.time_ms, true, now);
}

bool Job::StallCause(const JobFailure& held, JobFailure* f) const {
  // A rank that failed because of a peer, while the job stands stalled on a rank that is still
  // there: the stall is why (a key failed after HVD_STALL_SHUTDOWN_TIME_SECONDS on the ranks
  // waiting for the stalled one, which never fails by itself).
  if (status.stall.empty()) return false;
  std::map<int, StallReport> reports;
  for (const auto& [rank, s] : stalls) reports[rank] = s.report;
  for (int c : StallCulprits(reports)) {
    if (c == held.rank || c < 0 || c >= static_cast<int>(status.ranks.size()) ||
        !RankLive(status.ranks[c].state)) {
      continue;
    }
    f->rank = c;
    f->host = status.ranks[c].placement.host;
    f->message = "stalled: " + status.stall + "; then " + held.message;
    f->stderr_tail = RunningRankTail(c);
    return true;
  }
  return false;
}

JobFailure Job::WithPeerReport(JobFailure f) const {
  const auto said = peer_failed_.find(f.rank);
  if (said != peer_failed_.end() && !said->second.empty()) {
    // A rank's store value: one line of printable ASCII (a protobuf string must be valid UTF-8,
    // and hvdrun prints it to a terminal), at most 400 bytes of it.
    f.message += " after its runtime reported: " + control::LogEscape(said->second, 400);
  }
  return f;
}

bool Job::AgentGoneCause(const std::string& only_agent, const AgentConnected& connected,
                         JobFailure* f) const {
  // No agent of the job dropped: nothing to find, without walking every rank (this runs for each
  // rank failure, and a failing job of np ranks has np of them).
  if (only_agent.empty() && dropped_agents_.empty()) return false;
  if (!only_agent.empty() && LiveRanksOn(only_agent) == 0) return false;  // none of it there
  // The job's live ranks by agent, in rank order; then the first agent whose stream is down.
  std::map<std::string, std::vector<int>> by_agent;
  std::vector<std::string> order;
  for (const RankStatus& r : status.ranks) {
    if (!RankLive(r.state)) continue;
    if (!only_agent.empty() ? r.placement.agent_id != only_agent
                            : !dropped_agents_.count(r.placement.agent_id)) {
      continue;
    }
    std::vector<int>& ranks = by_agent[r.placement.agent_id];
    if (ranks.empty()) order.push_back(r.placement.agent_id);
    ranks.push_back(r.placement.rank);
  }
  for (const std::string& id : order) {
    if (connected(id)) continue;
    std::vector<int> ranks = by_agent[id];
    const size_t n = ranks.size();
    if (n > 8) ranks.resize(8);  // one line whatever np is
    const std::string& host = status.ranks[ranks[0]].placement.host;
    f->rank = ranks[0];
    f->host = host;
    f->exit_code = 0;
    f->signal = 0;
    f->stderr_tail.clear();
    f->message = "agent on " + host + " lost (agent " + id +
                 " dropped its connection to the launcher: it or its host went away); " +
                 RankList(ranks) +
                 (n > ranks.size() ? " and " + std::to_string(n - 8) + " more" : "") + " ran there";
    return true;
  }
  return false;
}

bool Job::AgentDropped(const std::string& agent_id, const AgentConnected& connected, Instant now) {
  JobFailure gone;
  if (finished || !AgentGoneCause(agent_id, connected, &gone)) return false;
  dropped_agents_.insert(agent_id);
  if (held_) {  // a rank failure blamed on a peer, waiting for its cause: this is it
    held_.reset();
    Fail(gone, control::kGenericFailureExitCode, now);
    SetCauseTime(0, false, now);
    return true;
  }
  // A rank's exit became the cause a moment ago (or blamed a peer): the agent's loss, reported
  // a little later over another connection, explains it. Older causes stand.
  const bool replace =
      cause_time_ms_ > 0 && (cause_secondary_ || now.steady - cause_set_at_ <= rules_.cause_settle);
  if (!replace) return false;
  std::string old_message;
  if (status.state == JobState::kFailed && status.has_failure) {
    old_message = status.failure.message;
    status.failure = gone;
    status.exit_code = control::kGenericFailureExitCode;
  } else if (status.state == JobState::kRestarting && !status.previous_failures.empty()) {
    old_message = status.previous_failures.back().message;
    status.previous_failures.back() = gone;
  } else {
    return false;
  }
  const size_t at = status.reason.find(old_message);
  if (!old_message.empty() && at != std::string::npos) {
    status.reason.replace(at, old_message.size(), gone.message);
  } else {
    status.reason = gone.message;
  }
  SetCauseTime(0, false, now);
  HVD_LOG(INFO) << "job " << status.id << ": cause is now " << gone.message << " (was "
                << old_message << ")";
  Changed(/*marker=*/true);
  return false;
}

}  // namespace hvd::launcherd
