// One job's life as a value: its record (JobStatus), its output log, and the rules that move it
// between states (docs/control-plane.md): PENDING -> STARTING -> RUNNING -> SUCCEEDED / FAILED /
// CANCELLED, RESTARTING between attempts, and which failure is the cause.
//
// A Job holds no lock and talks to nobody: JobManager guards it with its own mutex, sends the
// StopJob commands it asks for (TakeStops) and keeps the store and the watchers up to date through
// the observer. So every rule here is tested without a manager, agents or gRPC (job_test.cc).
//
// Causes: the first failure is the cause (rank, host, exit code or signal, stderr tail); later
// exits are recorded on their ranks but change nothing else, with two refinements before every
// rank is gone: a failure its rank's runtime blamed on a peer (abort/<rank>) is held up to
// cause_settle for the failure it is a consequence of, and a better one (blaming no peer, or dying
// earlier) replaces it. A rank that dies while an agent of its job is out of touch names that
// agent instead (job_causes.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/clock.h"
#include "control/placement.h"
#include "control/restart_policy.h"
#include "launcherd/job_log.h"
#include "launcherd/job_types.h"
#include "launcherd/stall_reports.h"

namespace hvd::launcherd {

// The two clocks a job's rules read: steady for timers, wall for the record's timestamps. Passed
// in, so tests choose the time.
struct Instant {
  std::chrono::steady_clock::time_point steady;
  int64_t wall_ms = 0;
  static Instant Now() { return {std::chrono::steady_clock::now(), base::WallMs()}; }
};

// The launcher's settings a job's rules need (from JobManagerOptions).
struct JobRules {
  control::RestartPolicy restart;                // the job's spec sets max_restarts
  std::chrono::milliseconds kill_grace{5000};    // when the spec sets none
  std::chrono::milliseconds cause_settle{1000};  // how long a peer-blamed failure is held
};

// Whether an agent's stream is up (AgentRegistry::Link(id) != nullptr in the launcher).
using AgentConnected = std::function<bool(const std::string& agent_id)>;
// Whether something agent `agent_id` sent at or before `before` was read by the launcher but is
// still waiting to be applied (agent_inbox.h): a deadline on the agent's answer must not blame
// the agent for the launcher's own backlog. Null: never.
using AgentBacklog =
    std::function<bool(const std::string& agent_id, std::chrono::steady_clock::time_point before)>;

// The scheduler's (job_scheduler.h): MASTER_PORT for a placed job, asked of rank 0's agent before
// its ranks start (job_master_port.cc); a new attempt or rank 0 on another agent asks again.
// Outside Job so that std::optional sees them complete (clang).
struct MasterPortAsk {
  std::string request_id;  // empty: not asked
  int attempt = 0;
  std::string agent_id, host;
  std::chrono::steady_clock::time_point deadline;
  int port = 0;       // the answer
  std::string error;  // the agent found none
  std::chrono::steady_clock::time_point answered;
};
struct JobPlacing {
  control::PlacementResult placement;
  // Since when (wall clock) the PENDING job holds it: not time waiting for slots, which
  // --queue-timeout counts.
  int64_t since_ms = 0;
  MasterPortAsk master_port;
};

class Job {
 public:
  using Clock = std::chrono::steady_clock;

  Job(JobRules rules, size_t max_output_lines, size_t max_output_bytes)
      : log(max_output_lines, max_output_bytes), rules_(std::move(rules)) {}
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const std::string& id() const { return status.id; }
  JobState state() const { return status.state; }
  bool terminal() const { return control::IsTerminal(status.state); }
  std::chrono::milliseconds KillGrace() const {
    return OrDefault(status.spec.kill_grace_ms, rules_.kill_grace);
  }

  // Called after every change a JobStatus shows (the job table persists it, watchers wake).
  void SetObserver(std::function<void(const Job&)> observer) { observer_ = std::move(observer); }
  // Bumps the version; `marker`: a status snapshot in the log too (a state or reason change).
  void Changed(bool marker);

  // --- State transitions. None sends anything: stops are queued for TakeStops().
  // Checked against control/job_state.h; an illegal one is logged and ignored (false).
  bool SetState(JobState to, const std::string& reason);
  // Ends an attempt that has not ended, with StopJob to its agents unless it succeeded.
  void End(JobState to, const std::string& reason, int exit_code, Instant now);
  // The attempt failed: FAILED, or RESTARTING when the restart policy allows another attempt
  // (never when `permanent`: the job cannot be placed, the launcher stops). Ignored once the job
  // ended or is restarting: the first failure is the cause.
  void Fail(const JobFailure& failure, int exit_code, Instant now, bool permanent = false);
  // RESTARTING, the back-off passed and no rank left: the caller erases the attempt's keys and
  // calls NextAttempt.
  bool RestartDue(Clock::time_point now) const;
  // PENDING as attempt n+1, everything of the failed attempt forgotten.
  // REQUIRES: RestartDue().
  void NextAttempt(Instant now);
  // Terminal with no rank left: finished (once; true the time it happens). The caller then
  // forgets the job's secret and erases its keys.
  bool Finish();

  // --- What agents report (job_events.cc's callers). True when the caller should settle the job
  // (its stops, held cause, restart or end); false when nothing of that changed.
  // REQUIRES: event.attempt is the job's current attempt.
  bool OnRankEvent(const RankEventReport& event, const std::string& agent_id,
                   const AgentConnected& connected, Instant now);
  // Whether any rank is STARTING or RUNNING, and whether every rank exited 0: O(1) from counts
  // kept as the rank events come (a per-event scan of every rank made a job cost O(np^2)).
  bool AnyRankLive() const { return Tally().live > 0; }
  bool AllRanksExitedZero() const {
    return !status.ranks.empty() &&
           Tally().exited_zero == static_cast<int64_t>(status.ranks.size());
  }
  // How many of its ranks are STARTING or RUNNING on the agent (O(log agents)).
  int64_t LiveRanksOn(const std::string& agent_id) const {
    const auto& on = Tally().live_by_agent;
    auto it = on.find(agent_id);
    return it == on.end() ? 0 : it->second;
  }
  // Call after changing status.ranks other than through the methods here (the scheduler's
  // start, a restore): the counts are taken afresh at the next question.
  void RanksReplaced() { tally_.valid = false; }
  // Marks the job's live ranks on the agent KILLED with `error`; returns them (in rank order).
  std::vector<int> KillRanksOnAgent(const std::string& agent_id, const std::string& error,
                                    int64_t now_ms);

  // --- Causes (job_causes.cc).
  // A rank exited non-zero or by a signal: the cause now, later, or a better one than before.
  void RankFailed(const JobFailure& f, int exit_code, int64_t time_ms,
                  const AgentConnected& connected, Instant now);
  // The held (peer-blamed) failure becomes the cause: every rank is gone, or cause_settle passed.
  void ReleaseHeld(Instant now);
  bool HeldDue(Clock::time_point now) const { return held_.has_value() && now >= settle_at_; }
  bool holds_failure() const { return held_.has_value(); }
  // The job's live ranks on an agent whose stream is down (`only_agent`, or any of the agents
  // that dropped while it ran), as the failure naming the first such agent ("agent on node-b
  // lost (...)"); false when there is none.
  bool AgentGoneCause(const std::string& only_agent, const AgentConnected& connected,
                      JobFailure* f) const;
  // The stream of `agent_id`, which runs live ranks of the job, dropped: a held failure, or a
  // rank's exit that became the cause a moment ago, is explained by it. True when it failed the
  // job (the caller settles it).
  bool AgentDropped(const std::string& agent_id, const AgentConnected& connected, Instant now);
  // The runtime of `rank` reported failing because of a peer (abort/<rank>).
  // `why`: its runtime's words (abort/<rank>'s value), added to its failure should that become the
  // cause (no failure of the peer came: it exited with code 0, for one).
  void NotePeerFailed(int rank, const std::string& why = "") { peer_failed_[rank] = why; }
  // ... and no longer (its runtime wrote an empty abort/<rank>).
  void PeerFailureWithdrawn(int rank) { peer_failed_.erase(rank); }

  // --- Elastic jobs (job_elastic.cc, docs/elastic.md): a worker that fails leaves the job,
  // which goes on with the others in a new membership generation, as long as at least --min-np
  // of them live; the runtime's workers read each generation from the rendezvous store.
  bool elastic() const { return control::IsElastic(status.spec); }
  // The last stderr lines of this attempt the log holds of `rank` (an elastic job's worker id,
  // as its stall reports name workers), which is still running: a stall's culprit, shown as an
  // exited rank's tail is.
  std::string RunningRankTail(int rank) const {
    return log.StderrTail(rank, control::kStderrTailLines, attempt_log_begin_);
  }
  // An elastic job whose workers can re-form: not one taken for a program without hvd (its start
  // timeout waived), where a lost worker leaves the others stuck in their own collectives, so a
  // loss fails the job as in a fixed one and it does not grow.
  bool ReForms() const { return elastic() && !start_timeout_waived; }
  // The job's workers were just started: generation 0 is all of them.
  void ElasticBegin(Instant now);
  // Worker f.rank failed (exited non-zero, was killed, could not start, lost with its agent:
  // `agent_lost`, which excludes its host from the job). Its slot is not used again by the job,
  // nor its host once two of the job's workers failed there (Horovod's blacklist, without a
  // cool-down). REQUIRES: elastic(), and its RankStatus already shows it ended.
  // `also`: every worker that left with it (an agent's), f.rank first. `failed` false: stopped
  // at the job's own request (its host left the discovery script's list): its slot stays usable
  // and its host is not held against.
  void WorkerLost(const JobFailure& f, int exit_code, Instant now, bool agent_lost = false,
                  const std::vector<int>& also = {}, bool failed = true);
  // Worker `reporter`'s runtime waited HVD_PEER_TIMEOUT_SECONDS at a re-form meeting for workers
  // it had run with (absent/<worker>; `value` a base::ElasticAbsence): those of the current
  // generation still live are stopped (a Stop naming their ranks), and their end reads as their
  // removal. True when a stop was queued (the caller settles the job).
  bool WorkersAbsent(int reporter, const std::string& value, Instant now);
  // The worker at `index` of generation `generation`'s members (one of the last few
  // generations: an arrival may be read after a newer one was published), or -1. An elastic
  // meeting's host/ key (base::ParseElasticMeetingKey) says that worker reached hvd.init().
  int MeetingWorker(int64_t generation, int index) const;
  // Since when the job has waited for elastic worker `id` to meet the others: since it runs and
  // is a member of a published generation, whichever came later (steady clock; kept in memory
  // only). False when not both (yet, or since a launcher restart).
  bool WaitedSince(int id, Clock::time_point* since) const;
  // Whether the launcher is stopping elastic worker `id` (RemoveWorkers) and its end has not come.
  bool BeingRemoved(int id) const { return removing_.count(id) > 0; }
  // Stops the live members of the current generation named in `why` (each one's reason, said in
  // its event and, when it ends, in its leaving; `short_reason` in the agent's StopRanks); those
  // already being removed are skipped. True when a stop was queued.
  // `failed` false: the job no longer wants them (WorkerLost's `failed`).
  bool RemoveWorkers(const std::map<int, std::string>& why, const std::string& short_reason,
                     Instant now, bool failed = true);
  // Shrinking by the discovery script (job_shrink.cc): the live workers beyond the job's host
  // list (on a host it no longer names, or above a named host's slots, the newest first), each
  // with why. `advertise`: agent id -> its advertised address (a list may name a host by it).
  std::map<int, std::string> WorkersBeyondHosts(
      const std::map<std::string, std::string>& advertise) const;
  // Stops `beyond`'s workers, unless the lowest worker id that stays (rank 0 after them, whose
  // state the others sync to) does not hold the training state (it was not started with the job
  // and has not committed since it joined: NoteCommitted); then they go on and shrink_pending()
  // says to try again later. True when a stop was queued.
  bool ShrinkTo(const std::map<int, std::string>& beyond, Instant now);
  bool shrink_pending() const { return shrink_pending_; }
  // Whether worker `id` is beyond the host list and waits for that holder: it does not count
  // against --max-np meanwhile (the listed hosts' new workers are what the stop waits for).
  bool ShrinkWaits(int id) const { return shrink_waiting_.count(id) > 0; }
  // How many of those are live and not being removed: what --max-np does not count.
  int WaitingToLeave() const;
  // Some workers wait to leave the list: the job grows even while others queue (its growth is
  // what lets them go, and gives back as many slots as it takes).
  bool ShrinkWaiting() const { return !shrink_waiting_.empty(); }
  // A shrink that cannot be decided now (an agent of the job is not back in touch: who is
  // beyond the list is unknown) is tried again at the next tick.
  void ShrinkLater() { shrink_pending_ = true; }
  // The reason a shrink gives the agent's StopRanks (and so the stopped rank's error).
  static constexpr const char* kLeftTheList = "left --host-discovery-script's list";
  // Whether worker `id` is being stopped because the host list left it out (not a failure).
  bool LeavingTheList(int id) const {
    auto it = removing_.find(id);
    return it != removing_.end() && !it->second.failed;
  }
  // Worker `worker` committed its state after it joined (base::RankKeyKind::kCommitted): it holds
  // the training state from now on.
  void NoteCommitted(int worker);
  // An elastic job's answer to --stall-timeout: the workers the stall ends at (`culprits`, live)
  // are stopped with `why` and the others re-form without them. kPending: some are being
  // removed already, or none is a member of the current generation; kNo: the job cannot go on
  // without them (fewer than --min-np would stay, it is finishing, or it cannot re-form), so it
  // fails as a fixed job does.
  enum class StallRemoval { kStarted, kPending, kNo };
  StallRemoval RemoveStalled(const std::set<int>& culprits, const std::string& why, Instant now);
  // When the newest generation was published (steady clock; the epoch when not since this
  // launcher started): a stall report older than it describes a generation that ended.
  Clock::time_point generation_published() const { return generation_published_; }
  // A removal whose worker still lives well past the kill grace (its stop never reached the
  // agent: the stream broke, the agent reconnected) is sent again, as SIGKILL. True when a stop
  // was queued.
  bool ResendRemovals(Clock::time_point now);
  // Growth (job_growth.cc): RUNNING with fewer live workers than --max-np.
  bool ElasticWantsWorkers() const;
  // Whether the job may start a worker on this agent's slot (not dropped, host not excluded).
  bool ElasticSlotUsable(const std::string& agent_id, const std::string& host, int slot,
                         Clock::time_point now) const;
  // The slots of `agent_id` this job's failed workers held: never used again, so they count
  // against the host's slots (-H or a discovery script's HOST:SLOTS) as if still taken.
  int DroppedSlotsOn(const std::string& agent_id) const;
  // Workers `ids` (appended to status.ranks and sent) joined: the next generation has them.
  void ElasticGrew(const std::vector<int>& ids, Instant now);
  // A worker exited 0: the job is finishing (job_elastic.cc).
  void WorkerFinished(int rank, Instant now);
  // After a launcher restart: the below --min-np clock from the record's wall time.
  void ElasticRestored(Instant now);
  // Every live worker is RUNNING (an elastic job is RUNNING then, whatever left on the way).
  bool AllLiveRunning() const;
  // Below --min-np for longer than --elastic-timeout: fails the job naming what was lost.
  bool ElasticDue(Clock::time_point now) const;
  void ElasticTimeout(Instant now);
  // Below --min-np, waiting for workers (not finishing, not ended).
  bool ElasticWaiting() const;
  // Whether `host` is left out of the job for its life (not for a --blacklist-cooldown-range).
  bool HostLeftOutForGood(const std::string& host) const;
  // Below --min-np where no worker can ever come (`why`: where the slots went): fails the job
  // now, naming what was lost, rather than after --elastic-timeout.
  void ElasticStranded(const std::string& why, Instant now);
  // Generations to write to the store (base::ElasticGenerationKey), oldest first.
  struct Publication {
    int64_t generation = 0;
    std::vector<int> workers;
    std::string finished;  // non-empty: base::ElasticFinishedKey's value instead of a generation
  };
  std::vector<Publication> TakePublications() { return std::move(publications_); }

  // StopJob commands asked for by End/Fail, for the caller to send (it records who got one).
  struct Stop {
    std::string agent_id;
    StopJobCommand command;
  };
  std::vector<Stop> TakeStops() { return std::move(stops_); }
  // StackDump commands asked for by AskForStacks, for the caller to send.
  struct StackDump {
    std::string agent_id;
    StackDumpCommand command;
  };
  std::vector<StackDump> TakeStackDumps() { return std::move(stack_dumps_); }
  // Queues a StackDump for each live rank of `ranks` (grouped by agent) and says so in the job's
  // log; returns the ranks asked. `once_per_stall`: only those not asked yet during this stall
  // (the stall a rank is asked in ends when no report stands: stacks_asked is cleared). `why`:
  // for the agents' logs.
  std::vector<int> AskForStacks(const std::set<int>& ranks, const std::string& why,
                                bool once_per_stall);
  // "rank 2" or "ranks 0, 1"; an elastic job's numbers are its workers' ("worker 2"), as its stall
  // reports and membership lines say.
  std::string RanksText(const std::vector<int>& ids) const {
    if (!elastic()) return RankList(ids);
    return (ids.size() == 1 ? "worker " : "workers ") + RankList(ids, false);
  }

  // --- The record and what the launcher's parts keep about the job. The state changes only
  // through the methods above.
  JobStatus status;
  std::string secret;
  JobLog log;
  uint64_t version = 1;  // bumped on every change a JobStatus shows
  bool finished = false;
  int ranks_started = 0;
  std::set<std::string> stop_sent;  // agents that were sent StopJob for this job
  int stop_signal = 0;              // StopJob's first signal (Cancel's); 0: SIGTERM
  Clock::time_point ended_at;
  // Agents that (re-)registered (or were restored after a launcher restart) and whose first
  // heartbeat since has not yet said whether they still run the job (job_recovery.cc).
  std::set<std::string> unconfirmed_agents;

  // The scheduler's: a placement held through the network check and the MASTER_PORT step, and
  // what it reported last.
  using MasterPortAsk = launcherd::MasterPortAsk;
  using Placing = JobPlacing;
  std::optional<Placing> placing;
  std::string agents_ready;  // last "agents ready n/N" sent, to send changes only

  // The supervisor's (job_supervision.h).
  int watchers = 0;                   // attached WatchJob calls in progress
  Clock::time_point unwatched_since;  // since when none is (submission counts)
  Clock::time_point attempt_started;  // this attempt entered STARTING
  int at_rendezvous = 0;              // ranks of this attempt that reached the rendezvous
  // The launcher's default start timeout passed with no rank of this attempt at the rendezvous:
  // the program does not use hvd, so it is not timed out.
  bool start_timeout_waived = false;
  // This attempt's rendezvous arrivals were restored from the job's record after a launcher
  // restart: one persisted late may be missing, so a rank's exit before it is not judged
  // (Supervisor::CheckLeftBeforeInit).
  bool rendezvous_restored = false;
  struct Stall {
    StallReport report;
    Clock::time_point received;
  };
  std::map<int, Stall> stalls;  // by reporting rank
  std::set<int> stacks_asked;   // the ranks asked for their stacks during the standing stall
  // The stall reports, each aged to `now` (its age when written plus the time since).
  std::map<int, StallReport> StallReportsAt(Clock::time_point now) const {
    std::map<int, StallReport> reports;
    for (const auto& [rank, s] : stalls) {
      StallReport& r = reports[rank] = s.report;
      r.age_s += std::chrono::duration<double>(now - s.received).count();
    }
    return reports;
  }

 private:
  void Restart(const JobFailure& failure, const control::RestartDecision& d, Instant now);
  // `reset`: running workers must re-form for it (counted against --reset-limit).
  void NewGeneration(std::vector<int> workers, const std::string& what, Instant now,
                     bool reset = true);
  void AddMembershipEvent(const std::string& what, Instant now);
  // The ids of the workers that may still run (STARTING or RUNNING), in id order.
  std::vector<int> LiveWorkers() const;
  // LiveWorkers but those being removed (removing_): the members a new generation gets.
  std::vector<int> StayingWorkers() const;
  void QueueStops(const std::string& reason);
  // Stamps the cause just set: when its rank died (0: not a rank's exit) and whether it blamed a
  // peer.
  void SetCauseTime(int64_t time_ms, bool secondary, Instant now);
  // `f` of a rank whose runtime reported failing because of a peer, with what it reported added
  // (NotePeerFailed's `why`): the cause's headline names the peer even when the peer never failed.
  JobFailure WithPeerReport(JobFailure f) const;
  // The failure naming the rank a standing stall ends at, for a rank failure `held` that blamed a
  // peer; false when no stall stands or its culprit is gone (or is that rank).
  bool StallCause(const JobFailure& held, JobFailure* f) const;

  // The counts behind AnyRankLive and AllRanksExitedZero. Taken afresh (O(np), once) when not
  // valid or when the number of ranks changed behind the job's back; kept up to date by
  // Count(r, -1) before and Count(r, +1) after every change of a rank's state made here.
  struct RankTally {
    bool valid = false;
    size_t size = 0;
    int64_t live = 0;
    int64_t exited_zero = 0;
    std::map<std::string, int64_t> live_by_agent;  // agents with live ranks only
  };
  const RankTally& Tally() const;
  void Count(const RankStatus& r, int delta);

  const JobRules rules_;
  std::function<void(const Job&)> observer_;
  std::vector<Stop> stops_;
  std::vector<StackDump> stack_dumps_;
  // RESTARTING: the next attempt starts at this time at the earliest.
  Clock::time_point restart_at_;

  // The failure's cause, when a rank exit: when it died (its agent's clock) and whether its
  // runtime blamed a peer; and when it was set (a dropped agent replaces it shortly after).
  int64_t cause_time_ms_ = 0;
  bool cause_secondary_ = false;
  Clock::time_point cause_set_at_;
  // Agents of live ranks whose stream dropped while the job ran (not those a restarted launcher
  // still waits for): a rank failure while one is away names it as the cause.
  std::set<std::string> dropped_agents_;
  // Ranks whose runtime reported failing because of a peer, and what it said.
  std::map<int, std::string> peer_failed_;
  struct HeldFailure {
    JobFailure failure;
    int exit_code = 0;
    int64_t time_ms = 0;
  };
  // A secondary failure waiting (until settle_at_) for the one it is a consequence of.
  std::optional<HeldFailure> held_;
  Clock::time_point settle_at_;
  mutable RankTally tally_;
  std::vector<Publication> publications_;
  Clock::time_point below_min_since_;  // elastic, below --min-np: since when (steady)
  std::set<std::pair<std::string, int>> dropped_slots_;  // (agent id, slot) of failed workers
  std::map<std::string, int> failures_by_host_;
  // Excluded host -> until when (max: the job's life); how often it was excluded.
  std::map<std::string, Clock::time_point> excluded_hosts_;
  std::map<std::string, int> exclusions_;
  void ExcludeHost(const std::string& host, Clock::time_point now);
  // "the job already changed membership 2 times (--reset-limit 2" (the caller closes it).
  std::string ResetLimitReached() const;
  // "fewer than --min-np 3 workers (2 live" (the caller closes it).
  std::string BelowMinNp() const;
  // The losses since the job was last at --min-np or more, oldest first, as said.
  std::string LossesSinceMinNp() const;
  // A worker exited 0: the training is over, the job ends as its workers do and never grows
  // again (a new worker would only load the final state and exit).
  bool elastic_finishing_ = false;
  std::string finished_by_;  // "worker 3 on host-b": the first to finish while others lived
  std::string first_loss_;   // the first worker that left, as said
  // Workers being stopped by RemoveWorkers: why (their end says it), what their agent was told,
  // and when it was last sent (ResendRemovals).
  struct Removal {
    std::string reason;
    std::string short_reason;
    Clock::time_point sent;
    bool failed = true;  // RemoveWorkers's
  };
  std::map<int, Removal> removing_;
  // Workers beyond the host list wait for a state holder to stay (ShrinkTo); said once.
  bool shrink_pending_ = false;
  std::set<int> shrink_waiting_;  // ShrinkWaits
  std::set<int> committed_;       // NoteCommitted's workers (in memory only)
  // Queues StopRanks for `ids` (in removing_), grouped by agent.
  void QueueRemovalStops(const std::vector<int>& ids, int signal, std::chrono::milliseconds grace,
                         Clock::time_point now);
  Clock::time_point last_loss_at_;
  // For WaitedSince: when each worker was first a member of a published generation, and when it
  // was reported RUNNING.
  std::map<int, Clock::time_point> member_since_;
  std::map<int, Clock::time_point> running_since_;
  // The member lists of the last kRecentGenerations generations (MeetingWorker).
  static constexpr size_t kRecentGenerations = 8;
  std::map<int64_t, std::vector<int>> recent_members_;
  Clock::time_point generation_published_{};
  // The log's index where this attempt began: a rank's tail is of this attempt's lines.
  int64_t attempt_log_begin_ = 0;
};

}  // namespace hvd::launcherd
