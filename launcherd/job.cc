// Job: state transitions, restarts and what a rank event does to the record. The choice of the
// cause among several failures is in job_causes.cc.
#include "launcherd/job.h"

#include <algorithm>

#include "base/logging.h"
#include "control/log_escape.h"

namespace hvd::launcherd {
namespace {

// FAILED_TO_START: like a shell that cannot run the command.
constexpr int kFailedToStartExitCode = 127;

bool ExitedZero(const RankStatus& r) {
  return r.state == RankState::kExited && r.exit_code == 0 && r.signal == 0;
}

}  // namespace

const Job::RankTally& Job::Tally() const {
  if (tally_.valid && tally_.size == status.ranks.size()) return tally_;
  tally_ = RankTally();
  tally_.valid = true;
  tally_.size = status.ranks.size();
  for (const RankStatus& r : status.ranks) {
    tally_.live += RankLive(r.state);
    tally_.exited_zero += ExitedZero(r);
    if (RankLive(r.state)) ++tally_.live_by_agent[r.placement.agent_id];
  }
  return tally_;
}

void Job::Count(const RankStatus& r, int delta) {
  if (!tally_.valid || tally_.size != status.ranks.size()) return;  // taken afresh when asked
  tally_.live += delta * RankLive(r.state);
  tally_.exited_zero += delta * ExitedZero(r);
  if (RankLive(r.state)) {
    auto it = tally_.live_by_agent.emplace(r.placement.agent_id, 0).first;
    if ((it->second += delta) <= 0) tally_.live_by_agent.erase(it);
  }
}

void Job::Changed(bool marker) {
  ++version;
  if (marker) log.AddStatus(status, version);
  if (observer_) observer_(*this);
}

bool Job::SetState(JobState to, const std::string& reason) {
  Status s = control::CheckTransition(status.state, to);
  if (!s.ok()) {
    HVD_LOG(ERROR) << "job " << status.id << ": " << s.message() << " (ignored; a bug)";
    return false;
  }
  status.state = to;
  status.reason = reason;
  Changed(/*marker=*/true);
  return true;
}

void Job::QueueStops(const std::string& reason) {
  std::set<std::string> agents;
  for (const RankStatus& r : status.ranks) {
    if (RankLive(r.state)) agents.insert(r.placement.agent_id);
  }
  for (const std::string& agent : agents) {
    stops_.push_back({agent, {status.id, reason, KillGrace().count(), stop_signal}});
  }
}

std::vector<int> Job::AskForStacks(const std::set<int>& ranks, const std::string& why,
                                   bool once_per_stall) {
  // A stall blames a few ranks; a report blaming many (a coordinator missing half the job) asks
  // the first few, not a flood of stacks into the job's capped log.
  constexpr size_t kMaxPerStall = 4;
  std::map<std::string, std::vector<int>> by_agent;
  std::vector<int> asked;
  for (int r : ranks) {
    if (r < 0 || r >= static_cast<int>(status.ranks.size()) || !RankLive(status.ranks[r].state)) {
      continue;
    }
    if (once_per_stall && (stacks_asked.size() >= kMaxPerStall || !stacks_asked.insert(r).second)) {
      continue;
    }
    by_agent[status.ranks[r].placement.agent_id].push_back(r);
    asked.push_back(r);
  }
  if (asked.empty()) return asked;
  log.AddProgress(std::string(control::kStacksAskedNote) + "asked " + RanksText(asked) +
                  (asked.size() == 1 ? " on " + status.ranks[asked[0]].placement.host + " for its"
                                     : " for their") +
                  " stacks (a rank using hvd writes them to its stderr)");
  for (auto& [agent, on_agent] : by_agent) {
    stack_dumps_.push_back(
        {agent, {status.id, status.attempt, std::move(on_agent), control::kStackDumpSignal, why}});
  }
  return asked;
}

void Job::End(JobState to, const std::string& reason, int exit_code, Instant now) {
  if (terminal()) return;
  // Every rank may exit 0 before the last RUNNING report was processed.
  if (to == JobState::kSucceeded && status.state == JobState::kStarting) {
    SetState(JobState::kRunning, "all ranks started");
  }
  status.exit_code = exit_code;
  status.end_time_ms = now.wall_ms;
  // Every rank gone already (reported late: their agents kept the exits while this launcher was
  // away): the job ended with its last rank, not when the reports came.
  int64_t last = 0;
  bool all_ended = !status.ranks.empty();
  for (const RankStatus& r : status.ranks) {
    all_ended = all_ended && !RankLive(r.state) && r.end_time_ms > 0;
    last = std::max(last, r.end_time_ms);
  }
  if (all_ended && last < now.wall_ms && last >= status.start_time_ms) status.end_time_ms = last;
  ended_at = now.steady;
  SetState(to, reason);
  HVD_LOG(INFO) << "job " << status.id << " " << control::JobStateName(to) << ": "
                << control::LogEscape(reason, 1024);
  if (to != JobState::kSucceeded) QueueStops(reason);
}

void Job::Fail(const JobFailure& failure, int exit_code, Instant now, bool permanent) {
  // The first failure is the cause; while restarting, the attempt's later failures are its echo.
  if (terminal() || status.state == JobState::kRestarting) return;
  control::RestartPolicy policy = rules_.restart;
  policy.max_restarts = status.spec.max_restarts;
  const control::RestartDecision d = control::DecideRestart(policy, status.attempt, permanent);
  if (d.restart) {
    Restart(failure, d, now);
    return;
  }
  status.has_failure = true;
  status.failure = failure;
  End(JobState::kFailed,
      failure.message +
          (d.text.empty() || status.attempt == 0
               ? ""
               : " (attempt " + std::to_string(status.attempt + 1) + "; " + d.text + ")"),
      exit_code, now);
}

void Job::Restart(const JobFailure& failure, const control::RestartDecision& d, Instant now) {
  status.previous_failures.push_back(failure);
  restart_at_ = now.steady + d.delay;
  // Counted from 1 as people count; the ranks saw HVD_ATTEMPT (and torchrun's
  // TORCHELASTIC_RESTART_COUNT) count from 0, so both are said.
  const std::string reason = "attempt " + std::to_string(status.attempt + 1) +
                             " (HVD_ATTEMPT=" + std::to_string(status.attempt) +
                             ") failed: " + failure.message + "; " + d.text;
  SetState(JobState::kRestarting, reason);
  HVD_LOG(INFO) << "job " << status.id << ": " << control::LogEscape(reason, 1024);
  log.AddProgress("restarting: " + d.text);
  QueueStops("restarting the job after: " + failure.message);
}

bool Job::RestartDue(Clock::time_point now) const {
  return status.state == JobState::kRestarting && now >= restart_at_ && !AnyRankLive();
}

void Job::NextAttempt(Instant now) {
  ++status.attempt;
  status.ranks.clear();
  RanksReplaced();
  status.start_time_ms = 0;
  status.stall.clear();
  status.stall_since_ms = 0;
  stalls.clear();
  stacks_asked.clear();
  attempt_log_begin_ = log.end();
  ranks_started = 0;
  at_rendezvous = 0;
  start_timeout_waived = false;
  rendezvous_restored = false;
  agents_ready.clear();
  stop_sent.clear();
  peer_failed_.clear();
  dropped_agents_.clear();
  held_.reset();
  cause_time_ms_ = 0;
  cause_secondary_ = false;
  status.queued_since_ms = now.wall_ms;  // --queue-timeout counts each wait for slots afresh
  placing.reset();                       // a placement of the failed attempt is no more
  status.elastic = control::ElasticStatus();
  publications_.clear();
  dropped_slots_.clear();
  failures_by_host_.clear();
  excluded_hosts_.clear();
  exclusions_.clear();
  elastic_finishing_ = false;
  finished_by_.clear();
  first_loss_.clear();
  removing_.clear();
  shrink_pending_ = false;
  shrink_waiting_.clear();
  committed_.clear();
  member_since_.clear();
  running_since_.clear();
  recent_members_.clear();
  SetState(JobState::kPending, "attempt " + std::to_string(status.attempt + 1) + " of " +
                                   std::to_string(status.spec.max_restarts + 1) +
                                   ": waiting for placement");
}

bool Job::Finish() {
  if (finished || !terminal() || AnyRankLive()) return false;
  finished = true;
  Changed(/*marker=*/true);
  return true;
}

std::vector<int> Job::KillRanksOnAgent(const std::string& agent_id, const std::string& error,
                                       int64_t now_ms) {
  std::vector<int> killed;
  if (LiveRanksOn(agent_id) == 0) return killed;  // without walking every rank
  for (RankStatus& r : status.ranks) {
    if (r.placement.agent_id != agent_id || !RankLive(r.state)) continue;
    Count(r, -1);
    r.state = RankState::kKilled;
    Count(r, +1);
    r.error = error;
    r.end_time_ms = now_ms;
    killed.push_back(r.placement.rank);
  }
  if (!killed.empty()) Changed(/*marker=*/false);
  return killed;
}

bool Job::OnRankEvent(const RankEventReport& ev, const std::string& agent_id,
                      const AgentConnected& connected, Instant now) {
  auto& ranks = status.ranks;
  if (ev.rank < 0 || ev.rank >= static_cast<int>(ranks.size()) ||
      ranks[ev.rank].placement.agent_id != agent_id) {
    HVD_LOG(WARNING) << "agent " << agent_id << " reported rank " << ev.rank << " of job "
                     << ev.job_id << ", which is not placed there; ignored";
    return false;
  }
  RankStatus& r = ranks[ev.rank];
  if (control::RankEnded(r.state)) return false;  // late or repeated
  const bool was_terminal = terminal();
  const int np = status.spec.np;
  // An exit reported before any RUNNING (a very short process) still counts as a start.
  if (ev.state == RankState::kRunning ||
      (ev.state == RankState::kExited && r.state != RankState::kRunning)) {
    if (r.state != RankState::kRunning) {
      Count(r, -1);
      r.state = RankState::kRunning;
      Count(r, +1);
      r.start_time_ms = now.wall_ms;
      running_since_[ev.rank] = now.steady;
      ++ranks_started;
      // For humans: about 20 steps whatever np is, always ending with N/N.
      const int step = std::max(1, np / 20);
      if (!was_terminal && ranks_started <= np &&
          (ranks_started == np || ranks_started % step == 0)) {
        log.AddProgress("ranks started " + std::to_string(ranks_started) + "/" +
                        std::to_string(np));
      }
    }
    if (ev.pid) r.pid = ev.pid;
    if (status.state == JobState::kStarting &&
        (elastic() ? AllLiveRunning() : ranks_started == np)) {
      SetState(JobState::kRunning,
               np == 1 ? "its one rank running" : "all " + std::to_string(np) + " ranks running");
    }
    Changed(/*marker=*/false);
    if (ev.state == RankState::kRunning) return false;
  }
  if (!control::RankEnded(ev.state)) {
    HVD_LOG(WARNING) << "agent " << agent_id << " sent rank state "
                     << control::RankStateName(ev.state) << "; ignored";
    return false;
  }
  Count(r, -1);
  r.state = ev.state;
  if (ev.pid) r.pid = ev.pid;
  r.exit_code = ev.exit_code;
  r.signal = ev.signal;
  Count(r, +1);
  r.error = ev.error;
  r.end_time_ms = ev.time_ms > 0 ? ev.time_ms : now.wall_ms;
  if (!r.start_time_ms) r.start_time_ms = r.end_time_ms;
  Changed(/*marker=*/false);

  JobFailure f;
  f.rank = ev.rank;
  f.host = r.placement.host;
  f.exit_code = ev.exit_code;
  f.signal = ev.signal;
  f.stderr_tail = ev.stderr_tail;
  if (ev.state == RankState::kExited && ev.exit_code == 0 && ev.signal == 0) {
    if (elastic()) WorkerFinished(ev.rank, now);
    if (elastic() ? !AnyRankLive() : AllRanksExitedZero()) {
      const std::string n =
          elastic() ? std::to_string(status.elastic.workers.size()) : std::to_string(np);
      End(JobState::kSucceeded,
          elastic() ? "the " + n + " worker" + (n == "1" ? "" : "s") + " of generation " +
                          std::to_string(status.elastic.generation) + " exited with code 0"
                    : (np == 1 ? "its one rank" : "all " + n + " ranks") + " exited with code 0",
          0, now);
    }
    return true;
  }
  int code = 0;
  if (ev.state == RankState::kExited) {
    f.message = control::DescribeRankExit(ev.rank, f.host, ev.exit_code, ev.signal);
    code = control::ExitCodeFor(ev.exit_code, ev.signal);
  } else if (ev.state == RankState::kFailedToStart) {
    f.message = "rank " + std::to_string(ev.rank) + " on " + f.host +
                " failed to start: " + (ev.error.empty() ? "no reason given" : ev.error);
    code = kFailedToStartExitCode;
  } else {  // kKilled while the job was not being torn down: its agent ended it
    f.message = "rank " + std::to_string(ev.rank) + " on " + f.host + " was killed by its agent" +
                (ev.error.empty() ? "" : ": " + ev.error);
    // Not the rank's doing (its launcher unreachable, its agent stopped): no rank is to blame,
    // whatever signal it took to end it (128 + SIGTERM read as the rank's own failure).
    code = control::kGenericFailureExitCode;
  }
  if (ReForms()) {
    // A worker the launcher stopped (RemoveWorkers): its end by the stop is its removal; one
    // that exited on its own first (a crash) says that.
    const auto removed = removing_.find(ev.rank);
    // The list's stop reaches the rank's error: that says it after a launcher restart too.
    bool failed =
        !(ev.state == RankState::kKilled && ev.error.find(kLeftTheList) != std::string::npos);
    if (removed != removing_.end()) {
      // Stopped because the host list left it out: no failure, however it ended (its host may
      // be going down, and SIGTERM it first).
      failed = removed->second.failed;
      if (ev.state == RankState::kKilled) {
        f.message = "rank " + std::to_string(ev.rank) + " on " + f.host +
                    " was removed: " + removed->second.reason;
        code = control::kGenericFailureExitCode;
      } else {
        f.message += " while the launcher was removing it";
      }
      removing_.erase(removed);
    }
    WorkerLost(f, code, now, false, {}, failed);  // the others go on without it
  } else if (ev.state == RankState::kExited) {
    RankFailed(f, code, r.end_time_ms, connected, now);
  } else {
    Fail(f, code, now);
  }
  return true;
}

}  // namespace hvd::launcherd
