// Job: the rules of an elastic job (hvdrun --min-np/--max-np; docs/elastic.md). A worker is a
// RankStatus whose index is its id for the job's whole life; a generation is the list of live
// workers in id order, published through the rendezvous store, where every worker's runtime
// finds its rank (runtime/core/elastic.h). A worker that fails leaves: the others re-form in a
// new generation as long as --min-np of them live; below that the job waits --elastic-timeout
// and fails naming what it lost.
#include <algorithm>
#include <csignal>
#include <map>
#include <set>

#include "base/clock.h"
#include "base/logging.h"
#include "base/rendezvous_keys.h"
#include "control/log_escape.h"
#include "launcherd/job.h"

namespace hvd::launcherd {
namespace {

// A job's record keeps the newest events only, so that a job whose workers come and go for
// weeks stays a small record.
constexpr size_t kMaxEvents = 100;
constexpr size_t kMaxEventWorkers = 64;

std::string Seconds(int64_t ms) {
  return std::to_string(ms / 1000) + (ms % 1000 ? "." + std::to_string(ms % 1000 / 100) : "") +
         " s";
}

}  // namespace

void Job::AddMembershipEvent(const std::string& what, Instant now) {
  auto& e = status.elastic;
  // A big job's events name the workers in `what` only: a hundred copies of a thousand ids
  // would make the record (rewritten on every change) and its REST answer large.
  e.events.push_back({e.generation, now.wall_ms,
                      e.workers.size() <= kMaxEventWorkers ? e.workers : std::vector<int>(), what});
  if (e.events.size() > kMaxEvents) e.events.erase(e.events.begin());
  log.AddProgress(what);
  HVD_LOG(INFO) << "job " << status.id << ": " << control::LogEscape(what, 1024);
}

void Job::NewGeneration(std::vector<int> workers, const std::string& what, Instant now,
                        bool reset) {
  auto& e = status.elastic;
  ++e.generation;
  if (e.generation > 0 && reset) ++e.resets;
  e.workers = std::move(workers);
  e.below_min_since_ms = 0;
  for (int w : e.workers) member_since_.emplace(w, now.steady);  // the first time only
  recent_members_[e.generation] = e.workers;
  while (recent_members_.size() > kRecentGenerations)
    recent_members_.erase(recent_members_.begin());
  Publication p;
  p.generation = e.generation;
  p.workers = e.workers;
  publications_.push_back(std::move(p));
  // The workers' stall reports described waits of the generation that ended: a worker still
  // stalled in the new one reports again after HVD_STALL_CHECK_TIME_SECONDS.
  stalls.clear();
  stacks_asked.clear();
  status.stall.clear();
  status.stall_since_ms = 0;
  generation_published_ = now.steady;
  AddMembershipEvent(what, now);
  Changed(/*marker=*/true);
}

void Job::ElasticBegin(Instant now) {
  if (!elastic()) return;
  status.elastic = control::ElasticStatus();
  publications_.clear();
  elastic_finishing_ = false;
  finished_by_.clear();
  std::vector<int> all;
  for (const RankStatus& r : status.ranks) all.push_back(r.placement.rank);
  const int n = static_cast<int>(all.size());
  NewGeneration(std::move(all),
                "generation 0: " + std::to_string(n) + " worker" + (n == 1 ? "" : "s") +
                    " (--min-np " + std::to_string(status.spec.min_np) + ", --max-np " +
                    std::to_string(status.spec.max_np) + ")",
                now);
}

std::vector<int> Job::StayingWorkers() const {
  std::vector<int> live = LiveWorkers();
  live.erase(std::remove_if(live.begin(), live.end(), [&](int id) { return removing_.count(id); }),
             live.end());
  return live;
}

std::vector<int> Job::LiveWorkers() const {
  std::vector<int> live;
  for (const RankStatus& r : status.ranks) {
    if (RankLive(r.state)) live.push_back(r.placement.rank);
  }
  return live;
}

bool Job::AllLiveRunning() const {
  for (const RankStatus& r : status.ranks) {
    if (r.state == RankState::kStarting || r.state == RankState::kPending) return false;
  }
  return true;
}

void Job::ElasticRestored(Instant now) {
  if (!elastic()) return;
  // The current generation's members, for MeetingWorker (its arrivals after the restart).
  if (status.elastic.generation >= 0) {
    recent_members_[status.elastic.generation] = status.elastic.workers;
  }
  const int64_t since = status.elastic.below_min_since_ms;
  if (since != 0) {
    below_min_since_ =
        now.steady - std::chrono::milliseconds(std::max<int64_t>(0, now.wall_ms - since));
  }
  // What the record implies of the rules kept in memory: failed workers' slots and hosts, and
  // whether a worker already finished.
  for (const RankStatus& r : status.ranks) {
    const control::RankSlot& p = r.placement;
    if (r.state == RankState::kExited && r.exit_code == 0 && r.signal == 0) {
      elastic_finishing_ = true;
      if (finished_by_.empty()) finished_by_ = "worker " + std::to_string(p.rank) + " on " + p.host;
    } else if (control::RankEnded(r.state) &&
               r.error.find(kLeftTheList) == std::string::npos) {  // not a shrink's
      dropped_slots_.insert({p.agent_id, p.slot});
      const bool agent_lost = r.error.find("agent on ") != std::string::npos;
      if (agent_lost || ++failures_by_host_[p.host] >= 2) {
        failures_by_host_[p.host] = 0;  // counted afresh when it comes back
        ExcludeHost(p.host, now.steady);
      }
    }
  }
  // Workers beyond the host list are looked for again at the next tick (a shrink that waited
  // is not in the record; workers say again that they committed within 10 s).
  shrink_pending_ = ReForms() && !status.spec.hosts.empty();
}

void Job::WorkerFinished(int rank, Instant now) {
  if (elastic_finishing_ || terminal() || !AnyRankLive()) {
    elastic_finishing_ = true;
    return;
  }
  // The others are told (base::ElasticFinishedKey): one whose collective fails because this
  // worker left must not wait for it in hvd.init() until --elastic-timeout; it fails at once.
  elastic_finishing_ = true;
  finished_by_ = "worker " + std::to_string(rank) + " on " + status.ranks[rank].placement.host;
  publications_.push_back({0, {}, finished_by_});
  // Progress, not a membership event: it changes nobody's rank and is how every job ends.
  log.AddProgress(finished_by_ + " finished (exit 0): the job ends as its other workers do");
  Changed(/*marker=*/false);
}

void Job::WorkerLost(const JobFailure& f, int exit_code, Instant now, bool agent_lost,
                     const std::vector<int>& also, bool failed) {
  if (terminal() || status.state == JobState::kRestarting) return;
  if (elastic_finishing_) {
    // Horovod's rule: once a worker finished, the job has succeeded; the others end as they do
    // (one still waiting to re-form gets "the job is ending" from hvd.init()). Said, as the
    // user must hear that training stopped early there, but not fatal.
    const std::string what = "worker " + std::to_string(f.rank) + " on " + f.host +
                             " ended after " + (finished_by_.empty() ? "a worker" : finished_by_) +
                             " finished: " + f.message;
    AddMembershipEvent(what, now);
    if (!AnyRankLive()) {
      End(JobState::kSucceeded,
          (finished_by_.empty() ? std::string("a worker") : finished_by_) +
              " finished training (exit 0); the last of the others: " + what,
          0, now);
    }
    Changed(/*marker=*/false);
    return;
  }
  // Workers that were leaving the host list (their agent lost as their host went down): no
  // failure either.
  const std::vector<int> gone = also.empty() ? std::vector<int>{f.rank} : also;
  bool leaving = true;
  for (int id : gone) leaving = leaving && LeavingTheList(id);
  if (leaving) failed = agent_lost = false;
  for (int id : gone) {
    if (id >= 0 && id < static_cast<int>(status.ranks.size()) &&
        !RankLive(status.ranks[id].state)) {
      RankStatus& r = status.ranks[id];
      if (LeavingTheList(id) && r.error.find(kLeftTheList) == std::string::npos) {
        r.error +=
            std::string(r.error.empty() ? "" : "; ") + "it " + kLeftTheList;  // a restart reads it
      }
      removing_.erase(id);
    }
  }
  if (failed && f.rank >= 0 && f.rank < static_cast<int>(status.ranks.size())) {
    const control::RankSlot& p = status.ranks[f.rank].placement;
    dropped_slots_.insert({p.agent_id, p.slot});
    if (agent_lost || ++failures_by_host_[p.host] >= 2) {
      failures_by_host_[p.host] = 0;  // counted afresh when it comes back
      ExcludeHost(p.host, now.steady);
    }
  }
  // Workers the launcher is stopping (RemoveWorkers) whose end has not come yet are as good as
  // gone: one generation leaves them all out, not one generation per end (two hung workers
  // named in one report made two re-forms).
  std::vector<int> live, being_removed;
  for (int id : LiveWorkers()) (removing_.count(id) ? being_removed : live).push_back(id);
  // "rank 3 on host-b exited with code 1" says it as "worker 3 on host-b exited with code 1".
  const std::string who = also.size() > 1 ? "workers " + RankList(also, false) + " on " + f.host
                                          : "worker " + std::to_string(f.rank) + " on " + f.host;
  const std::string as_rank = "rank " + std::to_string(f.rank) + " on " + f.host + " ";
  std::string left = f.message.rfind(as_rank, 0) == 0 ? who + " " + f.message.substr(as_rank.size())
                                                      : who + " left: " + f.message;
  if (first_loss_.empty()) first_loss_ = left;
  const auto& members = status.elastic.workers;
  if (std::find(members.begin(), members.end(), f.rank) == members.end() && live == members) {
    // Left out of the generation already (it was being removed when another's end made one):
    // nobody's membership changes, so nobody re-forms.
    AddMembershipEvent(left + " (left out of generation " +
                           std::to_string(status.elastic.generation) + " already)",
                       now);
    Changed(/*marker=*/true);  // a membership event: watchers show it now
    return;
  }
  const bool first = first_loss_ == left;
  if (!being_removed.empty()) {
    left += "; worker" + std::string(being_removed.size() == 1 ? " " : "s ") +
            RankList(being_removed, false) + ", being removed too, left out";
  }
  const int min_np = status.spec.min_np;
  if (live.empty()) {
    JobFailure last = f;
    last.message =
        (being_removed.empty() ? std::string("every worker of the elastic job is gone")
                               : "no worker of the elastic job is left but those being removed") +
        (first ? "; the last, " + left
               : " (the first to go: " + first_loss_ + "); the last, " + left +
                     " (if they failed because a peer did, the program "
                     "must catch HorovodInternalError and re-form, as "
                     "hvd.elastic.run does; its own exceptions end a worker)");
    Fail(last, exit_code, now);
    return;
  }
  if (static_cast<int>(live.size()) < min_np) {
    auto& e = status.elastic;
    if (e.below_min_since_ms == 0) {
      e.below_min_since_ms = now.wall_ms;
      below_min_since_ = now.steady;
    }
    AddMembershipEvent(left + "; " + std::to_string(live.size()) + " worker" +
                           (live.size() == 1 ? "" : "s") + " left, fewer than --min-np " +
                           std::to_string(min_np) + ": waiting up to --elastic-timeout " +
                           Seconds(status.spec.elastic_timeout_ms) + " for more",
                       now);
    Changed(/*marker=*/true);
    return;
  }
  // Losses within a second of each other are one change for --reset-limit (a host's agent
  // stopping reports its workers one by one), as Horovod counts one reset per re-form.
  const bool counts = status.elastic.generation <= 0 ||
                      now.steady - last_loss_at_ > std::chrono::milliseconds(1000);
  last_loss_at_ = now.steady;
  const int limit = status.spec.reset_limit;
  if (limit > 0 && counts && status.elastic.resets >= limit) {
    JobFailure g = f;
    g.message = left + "; " + ResetLimitReached() + ")";
    Fail(g, exit_code, now);
    return;
  }
  const size_t n = live.size();
  if (status.state == JobState::kStarting && AllLiveRunning()) {
    SetState(JobState::kRunning, "all " + std::to_string(n) + " live workers running");
  }
  NewGeneration(std::move(live),
                "generation " + std::to_string(status.elastic.generation + 1) + ": " + left + "; " +
                    std::to_string(n) + (n == 1 ? " worker goes on" : " workers go on"),
                now, counts);
}

int Job::MeetingWorker(int64_t generation, int index) const {
  if (!elastic()) return -1;
  auto it = recent_members_.find(generation);
  if (it == recent_members_.end() || index < 0 || index >= static_cast<int>(it->second.size())) {
    return -1;
  }
  const int id = it->second[index];
  return id >= 0 && id < static_cast<int>(status.ranks.size()) ? id : -1;
}

bool Job::WaitedSince(int id, Clock::time_point* since) const {
  auto member = member_since_.find(id);
  auto running = running_since_.find(id);
  if (member == member_since_.end() || running == running_since_.end()) return false;
  *since = std::max(member->second, running->second);
  return true;
}

bool Job::WorkersAbsent(int reporter, const std::string& value, Instant now) {
  if (!elastic() || terminal() || elastic_finishing_ || value.empty()) return false;
  base::ElasticAbsence a;
  Status s = base::ParseElasticAbsence(value, &a);
  if (!s.ok()) {
    HVD_LOG(WARNING) << "job " << status.id << ": worker " << reporter << ": " << s.message();
    return false;
  }
  // A report about an older generation is overtaken: a new one was published since. One from
  // a worker being removed itself is not trusted.
  if (a.generation != status.elastic.generation || !RankLive(status.ranks[reporter].state) ||
      removing_.count(reporter)) {
    return false;
  }
  std::map<int, std::string> why;
  for (int id : a.workers) {
    if (id == reporter) continue;
    why[id] = "it did not come back to re-form generation " + std::to_string(a.generation) +
              " while worker " + std::to_string(reporter) + " on " +
              status.ranks[reporter].placement.host + " waited " + Seconds(a.waited_ms) +
              " (HVD_PEER_TIMEOUT_SECONDS) for it: hung, stopped, or busy outside hvd that long; "
              "stopped by the launcher";
  }
  return RemoveWorkers(why, "did not come back to re-form (hung?)", now);
}

bool Job::RemoveWorkers(const std::map<int, std::string>& why, const std::string& short_reason,
                        Instant now, bool failed) {
  if (!elastic() || terminal() || elastic_finishing_) return false;
  const std::set<int> members(status.elastic.workers.begin(), status.elastic.workers.end());
  std::vector<int> ids;
  for (const auto& [id, reason] : why) {
    if (!members.count(id) || removing_.count(id) || id >= static_cast<int>(status.ranks.size()) ||
        !RankLive(status.ranks[id].state)) {
      continue;
    }
    removing_[id] = Removal{reason, short_reason, now.steady, failed};
    ids.push_back(id);
    AddMembershipEvent("worker " + std::to_string(id) + " on " + status.ranks[id].placement.host +
                           " is being removed: " + reason,
                       now);
  }
  if (ids.empty()) return false;
  QueueRemovalStops(ids, 0, KillGrace(), now.steady);
  Changed(/*marker=*/true);  // a membership event: watchers show it now
  return true;
}

Job::StallRemoval Job::RemoveStalled(const std::set<int>& culprits, const std::string& why,
                                     Instant now) {
  if (!ReForms() || elastic_finishing_ || terminal()) return StallRemoval::kNo;
  const std::set<int> members(status.elastic.workers.begin(), status.elastic.workers.end());
  std::map<int, std::string> remove;
  for (int id : culprits) {
    if (removing_.count(id)) return StallRemoval::kPending;  // on its way out
    if (members.count(id)) remove[id] = why;
  }
  if (remove.empty()) return StallRemoval::kPending;  // not of this generation
  const int staying = static_cast<int>(StayingWorkers().size()) - static_cast<int>(remove.size());
  if (staying < std::max(1, status.spec.min_np)) return StallRemoval::kNo;
  return RemoveWorkers(remove, "stalled (--stall-timeout)", now) ? StallRemoval::kStarted
                                                                 : StallRemoval::kNo;
}

bool Job::ResendRemovals(Clock::time_point now) {
  if (removing_.empty() || terminal()) return false;
  const auto overdue = KillGrace() + std::chrono::seconds(5);
  std::vector<int> ids;
  for (const auto& [id, r] : removing_) {
    if (RankLive(status.ranks[id].state) && now - r.sent >= overdue) ids.push_back(id);
  }
  if (ids.empty()) return false;
  HVD_LOG(WARNING) << "job " << status.id << ": worker(s) " << RankList(ids, false)
                   << " still running " << base::SecondsText(overdue)
                   << " after the launcher stopped them; stopping them again with SIGKILL";
  QueueRemovalStops(ids, SIGKILL, std::chrono::milliseconds(0), now);
  return true;
}

void Job::QueueRemovalStops(const std::vector<int>& ids, int signal,
                            std::chrono::milliseconds grace, Clock::time_point now) {
  std::map<std::string, std::vector<int>> by_agent;
  for (int id : ids) {
    by_agent[status.ranks[id].placement.agent_id].push_back(id);
    removing_[id].sent = now;
  }
  for (auto& [agent, on_agent] : by_agent) {
    StopJobCommand c{status.id,
                     "elastic worker" + std::string(on_agent.size() == 1 ? " " : "s ") +
                         RankList(on_agent, false) + " " + removing_[on_agent[0]].short_reason,
                     grace.count(), signal};
    c.ranks = on_agent;
    c.attempt = status.attempt;
    stops_.push_back({agent, std::move(c)});
  }
}

bool Job::ElasticDue(Clock::time_point now) const {
  return elastic() && !terminal() && status.elastic.below_min_since_ms != 0 &&
         now - below_min_since_ >= std::chrono::milliseconds(status.spec.elastic_timeout_ms);
}

std::string Job::ResetLimitReached() const {
  const int limit = status.spec.reset_limit;
  return "the job already changed membership " + std::to_string(limit) + " time" +
         (limit == 1 ? "" : "s") + " (--reset-limit " + std::to_string(limit);
}

std::string Job::LossesSinceMinNp() const {
  const auto& events = status.elastic.events;
  std::string lost;
  int n = 0;
  for (auto it = events.rbegin(); it != events.rend() && n < 8; ++it, ++n) {
    if (it->what.rfind("generation ", 0) == 0) break;
    if (it->what.find(" is being removed: ") != std::string::npos) continue;  // said when gone
    if (it->what.find(" (left out of generation ") != std::string::npos) continue;  // said before
    // Not losses: workers joining below --min-np, workers beyond the host list going on.
    if (it->what.find(" joined; ") != std::string::npos) continue;
    if (it->what.find(" on though --host-discovery-script's list") != std::string::npos) continue;
    lost = it->what.substr(0, it->what.find("; ")) + (lost.empty() ? "" : "; " + lost);
  }
  return lost;
}

std::string Job::BelowMinNp() const {
  int live = 0;
  for (const RankStatus& r : status.ranks) live += RankLive(r.state);
  return "fewer than --min-np " + std::to_string(status.spec.min_np) + " workers (" +
         std::to_string(live) + " live";
}

void Job::ElasticTimeout(Instant now) {
  JobFailure f;
  f.message = BelowMinNp() + ") for " + Seconds(status.spec.elastic_timeout_ms) +
              " (--elastic-timeout): " + LossesSinceMinNp();
  Fail(f, control::kGenericFailureExitCode, now);
}

bool Job::ElasticWaiting() const {
  const JobState state = status.state;
  return elastic() && (state == JobState::kRunning || state == JobState::kStarting) &&
         !elastic_finishing_ && status.elastic.below_min_since_ms != 0;
}

bool Job::HostLeftOutForGood(const std::string& host) const {
  auto it = excluded_hosts_.find(host);
  return it != excluded_hosts_.end() && it->second == Clock::time_point::max();
}

void Job::ElasticStranded(const std::string& why, Instant now) {
  if (!ElasticWaiting()) return;
  JobFailure f;
  f.message = BelowMinNp() + "), and no worker can come: " + why +
              "; not waiting --elastic-timeout: " + LossesSinceMinNp();
  Fail(f, control::kGenericFailureExitCode, now);
}

}  // namespace hvd::launcherd
