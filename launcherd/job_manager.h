// The job table and each job's life (docs/control-plane.md): submit -> PENDING (with the reason)
// -> placement -> StartRank to agents -> STARTING -> RUNNING -> SUCCEEDED / FAILED / CANCELLED,
// teardown (StopJob) and cleanup (rendezvous keys, secret). Thread-safe; every entry point is a
// plain C++ call (the gRPC services and the HTTP server translate to and from it).
//
// Choices:
//  - Queueing: pending jobs are retried in submit order whenever agents register, slots free up or
//    agents are lost; a job that does not fit yet does not hold back later ones that do (first
//    fit, so a large job can wait while small ones keep starting).
//  - A job is "finished" once it is terminal and none of its ranks is STARTING or RUNNING any more.
//    Only then are its rendezvous keys erased, its secret forgotten, and WatchJob's stream ended.
//  - The first failure is the cause (rank, host, exit code or signal, stderr tail); later exits and
//    kills are recorded on their ranks but change nothing else. With max_restarts, a failure
//    instead ends the attempt: RESTARTING until its ranks are gone, then PENDING as attempt n+1
//    (control/restart_policy.h), the cause kept in previous_failures.
//  - Supervision (job_supervision.cc, driven by Tick()): a rank that does not reach the rendezvous
//    within the start timeout, a stall reported for longer than the stall timeout, and an attached
//    client gone for longer than its lease each end the job with a message naming who and why.
//  - With a JobStore every change is written through, and Restore() reloads the table after a
//    restart; restored jobs wait for their agents to re-register and say what still runs
//    (job_recovery.cc).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "control/restart_policy.h"
#include "launcherd/agent_registry.h"
#include "launcherd/job_log.h"
#include "launcherd/job_store.h"
#include "launcherd/job_types.h"
#include "launcherd/kv_store.h"
#include "launcherd/stall_reports.h"
#include "launcherd/stdin_relay.h"

namespace hvd::launcherd {

class NetworkCheck;

struct JobManagerOptions {
  std::string rendezvous_address;  // "host:port" of the runtime's endpoint (HVD_RENDEZVOUS)
  std::chrono::milliseconds kill_grace{5000};
  // How long after a job ended an agent may still list it among its running jobs before the
  // launcher sends StopJob again and stops counting the job's ranks there against its slots.
  std::chrono::milliseconds reconcile_after{15000};
  size_t max_output_lines = 100000;     // per job
  size_t max_output_bytes = 64u << 20;  // per job
  size_t max_finished_jobs = 500;       // older finished jobs are forgotten
  // Defaults for jobs whose spec sets none; 0: no limit.
  std::chrono::milliseconds start_timeout{30000};
  // A job submitted attached is cancelled when no attached watcher has been connected this long.
  std::chrono::milliseconds client_lease{5000};
  // How long a failure that a rank's runtime attributed to a peer (abort/<rank> in the store) is
  // held back, waiting for the failure it is a consequence of, before it becomes the cause.
  std::chrono::milliseconds cause_settle{1000};
  // Delays between restarts (the count is each job's max_restarts).
  control::RestartPolicy restart;
  JobStore* job_store = nullptr;    // where every change is written; null: nothing persisted
  NetworkCheck* network = nullptr;  // checks a multi-host job's network first (null: never)
  // How long rank 0's agent has to choose MASTER_PORT before the job fails naming it
  // (job_master_port.cc). 0: no MASTER_PORT is chosen and ranks get none (JobManager tests whose
  // fake agents do not answer); the launcher always sets it.
  std::chrono::milliseconds master_port_timeout{0};
};

// Where one WatchJob call stands; starts zeroed.
struct WatchCursor {
  bool started = false;
  int64_t next = 0;               // next JobLog index to send
  int64_t backlog_end = 0;        // the log's end when the watch began
  int64_t output_only_until = 0;  // a resumed watch replays only output before this index
  uint64_t status_sent = 0;       // version of the last status sent
  bool last_was_status = false;
};

struct JobCounts {
  std::map<JobState, int> jobs;
  int ranks_running = 0;
  std::map<std::string, int> slots_in_use;  // agent id -> live ranks there
};

class JobManager {
 public:
  // `agents` and `store` must outlive the manager.
  JobManager(JobManagerOptions options, AgentRegistry* agents, KvStore* store);
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Validates, assigns an id and a secret, queues the job and tries to place it at once.
  Status Submit(const JobSpec& spec, std::string* id);
  Status Get(const std::string& id, JobStatus* out) const;
  // Every job in submit order, without its ranks (GetJob has them): a list of hundreds of large
  // jobs must stay small enough for one gRPC message.
  std::vector<JobStatus> List() const;
  // One page of the jobs in submit order, for ListJobs: from the job after `after_id` (empty: the
  // first job; an id no longer kept: the first job submitted after `after_submit_ms`), `take` is
  // called with each job under the manager's lock until it returns false (it did not take that
  // job: the page is full). *more: jobs remain after the page. `take` must not call back in.
  void ListPage(const std::string& after_id, int64_t after_submit_ms,
                const std::function<bool(const JobStatus&)>& take, bool* more) const;
  // Cancels a job that has not ended (CANCELLED, StopJob to its agents); an ended job is left as
  // it is. *state is the job's state afterwards. `signal` is the first signal its ranks get (0:
  // SIGTERM; hvdrun passes on the SIGINT or SIGHUP it received). SIGKILL on a job that has ended
  // but whose ranks still run kills them now instead (hvdrun's second Ctrl-C).
  Status Cancel(const std::string& id, const std::string& reason, JobState* state,
                int signal = 0);

  // WatchJob's source. With from_seq 0: the job's history in the order it happened (a status
  // snapshot at submission and at each state or reason change, progress messages, output lines).
  // With from_seq > 0 (resuming a broken watch): the current status, then the output from
  // from_seq. Then, with `follow`, what happens next: later calls block up to `wait` for it.
  // *done becomes true when nothing more will come (the job finished and all was yielded; without
  // `follow`, the history was yielded; or CloseWatches() was called); the last event is then
  // always the job's newest status.
  Status NextEvents(const std::string& id, int64_t from_seq, bool follow,
                    std::chrono::milliseconds wait, WatchCursor* cursor,
                    std::vector<JobEvent>* events, bool* done);

  // Retries placement of pending jobs (after agents registered or slots freed).
  void Schedule();
  // From agents (job_events.cc).
  void OnRankEvent(const std::string& agent_id, const RankEventReport& event);
  void OnOutput(const std::string& agent_id, const std::string& job_id,
                std::vector<OutputLine> lines);
  void OnHeartbeat(const std::string& agent_id, const std::vector<std::string>& running_jobs);
  void OnAgentLost(const AgentInfo& agent);
  // The agent's stream dropped (it crashed, or its host or the network went): not LOST yet (it may
  // reconnect within the lease), but a failing job with ranks there names "agent on <host> lost"
  // as its cause instead of a rank that died because its peer vanished (job_events.cc).
  void OnAgentDisconnected(const std::string& agent_id);
  // An agent's answer to a MasterPortRequest (job_master_port.cc).
  void OnMasterPort(const std::string& agent_id, const MasterPortAnswer& answer);
  // The agent (re-)registered: after a reconnect, a restart of the agent or of the launcher, its
  // first heartbeat decides which of the ranks placed on it still run; the others ended while it
  // was out of touch and are reported as such (job_recovery.cc).
  void OnAgentRegistered(const std::string& agent_id);

  // Reloads the table from options.job_store (call once, before agents connect). Jobs that had
  // ranks running wait for those agents; `expected` gets each such agent (id and host) so the
  // registry can declare it lost if it does not come back within the lease.
  Status Restore(std::vector<AgentInfo>* expected);
  // A key the runtime wrote to the rendezvous store (KvStore's observer): a rank reaching the
  // rendezvous ("job/<id>/attempt/<n>/host/<rank>") or a stall report (".../stall/<rank>").
  void OnRendezvousKey(const std::string& key, const std::string& value);
  // An attached client started or stopped following the job (WatchJob with attach).
  void WatchStarted(const std::string& id);
  void WatchEnded(const std::string& id);
  // Runs the timers: start and stall timeouts, attached clients gone, delayed restarts. Called
  // often (the launcher's sweeper, every lease/10).
  void Tick();

  // The SecretResolver of the rendezvous endpoints: a live job's secret -> "job/<id>/".
  bool ResolveSecret(const std::string& secret, std::string* prefix) const;

  JobCounts Counts() const;

  // hvdrun's standard input on its way to each job's stdin rank (stdin_service.h).
  StdinRelay& stdin_relay() { return stdin_relay_; }

  // Refuses new jobs and cancels every job that has not ended (StopJob to agents). Idempotent.
  void Shutdown(const std::string& reason);
  // Waits up to `timeout` until no job has a rank left; true when none has.
  bool WaitRanksGone(std::chrono::milliseconds timeout);
  // Ends every watch (after their last events). Idempotent.
  void CloseWatches();

 private:
  using Clock = std::chrono::steady_clock;

  struct Job {
    Job(size_t max_lines, size_t max_bytes) : log(max_lines, max_bytes) {}
    JobStatus status;
    std::string secret;
    JobLog log;
    uint64_t version = 1;  // bumped on every change a JobStatus shows
    bool finished = false;
    int ranks_started = 0;
    std::string agents_ready;         // last "agents ready n/N" sent, to send changes only
    std::set<std::string> stop_sent;  // agents that were sent StopJob for this job
    int stop_signal = 0;              // StopJob's first signal (Cancel's); 0: SIGTERM
    Clock::time_point ended_at;
    // The failure's cause, when a rank exit: when it died (its agent's clock) and whether its
    // runtime blamed a peer. A better cause (not blaming a peer, or dying earlier) reported
    // before every rank is gone replaces it.
    int64_t cause_time_ms = 0;
    bool cause_secondary = false;
    // When the current cause was set (a rank exit): a dropped agent replaces it shortly after.
    Clock::time_point cause_set_at;
    // Agents of live ranks whose stream dropped while the job ran (not those a restarted launcher
    // still waits for): a rank failure while one is away names it as the cause.
    std::set<std::string> dropped_agents;
    std::set<int> peer_failed;  // ranks whose runtime reported failing because of a peer
    struct HeldFailure {
      JobFailure failure;
      int exit_code = 0;
      int64_t time_ms = 0;
    };
    // A secondary failure waiting (until settle_at) for the one it is a consequence of.
    std::optional<HeldFailure> held;
    Clock::time_point settle_at;
    std::condition_variable cv;  // log appended, status changed, or shutdown
    // Supervision (job_supervision.cc).
    int watchers = 0;                   // attached WatchJob calls in progress
    Clock::time_point unwatched_since;  // since when none is (submission counts)
    Clock::time_point attempt_started;  // this attempt entered STARTING
    int at_rendezvous = 0;              // ranks of this attempt that reached the rendezvous
    // The launcher's default start timeout passed with no rank of this attempt at the rendezvous:
    // the program does not use hvd (torch.distributed under torchrun's variables, a script), so
    // it is not timed out (CheckStartTimeoutLocked).
    bool start_timeout_waived = false;
    struct Stall {
      StallReport report;
      Clock::time_point received;
    };
    std::map<int, Stall> stalls;   // by reporting rank
    Clock::time_point restart_at;  // RESTARTING: the next attempt starts once ranks are gone and
                                   // this time has come
    // Agents that (re-)registered (or were restored after a launcher restart) and whose first
    // heartbeat since has not yet said whether they still run the job.
    std::set<std::string> unconfirmed_agents;
    // MASTER_PORT for this attempt, asked of rank 0's agent before its ranks start
    // (job_master_port.cc); a new attempt or rank 0 on another agent asks again.
    struct MasterPortAsk {
      std::string request_id;  // empty: not asked
      int attempt = 0;
      std::string agent_id, host;
      Clock::time_point deadline;
      int port = 0;       // the answer
      std::string error;  // the agent found none
      Clock::time_point answered;
    };
    MasterPortAsk master_port;
    // Since when (NowMs) the PENDING job holds a placement going through the network check and
    // the MASTER_PORT step; 0 while it waits for slots. That time is not time waiting for slots:
    // --queue-timeout does not count it, and a placement lost drops its MASTER_PORT request.
    int64_t placed_since_ms = 0;
  };
  using JobPtr = std::shared_ptr<Job>;

  JobPtr FindLocked(const std::string& id) const REQUIRES(mu_);
  void ScheduleLocked() REQUIRES(mu_);
  std::map<std::string, std::set<int>> BusySlotsLocked() const REQUIRES(mu_);
  void StartLocked(Job& job, const control::PlacementResult& placement,
                   const std::vector<control::AgentSlots>& agents) REQUIRES(mu_);
  void ReportAgentsReadyLocked(Job& job, const std::vector<control::AgentSlots>& agents)
      REQUIRES(mu_);
  // Whether the placed job's network is decided (job_network.cc); false: it waits or failed.
  bool NetworkReadyLocked(Job& job, const control::PlacementResult& placement) REQUIRES(mu_);
  // Whether MASTER_PORT is chosen for the placed job (job_master_port.cc); false: it waits for
  // rank 0's agent, or failed.
  bool MasterPortReadyLocked(Job& job, const control::PlacementResult& placement) REQUIRES(mu_);
  // A PENDING job whose MASTER_PORT request went unanswered past its deadline fails.
  void CheckMasterPortLocked(Job& job, Clock::time_point now) REQUIRES(mu_);
  void AddEventsLocked(Job& job, int64_t from_seq, bool follow, WatchCursor* cursor,
                       std::vector<JobEvent>* events, bool* done) REQUIRES(mu_);
  // State changes (job_events.cc).
  void SetStateLocked(Job& job, JobState to, const std::string& reason) REQUIRES(mu_);
  // The attempt failed: FAILED, or RESTARTING when the restart policy allows another attempt
  // (never when `permanent`: the job cannot be placed, the launcher stops).
  void FailLocked(Job& job, const JobFailure& failure, int exit_code, bool permanent = false)
      REQUIRES(mu_);
  void RestartLocked(Job& job, const JobFailure& failure, const control::RestartDecision& d)
      REQUIRES(mu_);
  void NextAttemptLocked(Job& job) REQUIRES(mu_);
  std::chrono::milliseconds KillGrace(const Job& job) const;
  // Supervision (job_supervision.cc).
  void CheckStartTimeoutLocked(Job& job, Clock::time_point now) REQUIRES(mu_);
  void CheckStallTimeoutLocked(Job& job, Clock::time_point now) REQUIRES(mu_);
  // --queue-timeout: a job PENDING for longer fails (never restarted: waiting again would not
  // help).
  void CheckQueueTimeoutLocked(Job& job) REQUIRES(mu_);
  void RankAtRendezvousLocked(Job& job, int rank) REQUIRES(mu_);
  void StallReportLocked(Job& job, int rank, const std::string& value) REQUIRES(mu_);
  // Persistence and recovery (job_recovery.cc).
  void PersistLocked(const Job& job) REQUIRES(mu_);
  void ReconcileUnconfirmedLocked(const std::string& agent_id, const std::set<std::string>& running)
      REQUIRES(mu_);
  void EndLocked(Job& job, JobState to, const std::string& reason, int exit_code) REQUIRES(mu_);
  void StopAgentsLocked(Job& job, const std::string& reason) REQUIRES(mu_);
  void RankEndedLocked(Job& job) REQUIRES(mu_);
  // A rank exited non-zero or by a signal: the cause now, later, or a better one than before.
  void RankFailedLocked(Job& job, const JobFailure& f, int exit_code, int64_t time_ms)
      REQUIRES(mu_);
  void ReleaseHeldLocked(Job& job) REQUIRES(mu_);
  // The job's live ranks on an agent whose stream is down (`only_agent`, or any of
  // job.dropped_agents), as the failure naming the first such agent ("agent on node-b lost
  // (...)"); false when there is none.
  bool AgentGoneCauseLocked(const Job& job, const std::string& only_agent, JobFailure* f)
      REQUIRES(mu_);
  // Marks the job's live ranks on the agent KILLED with `error`; returns them (in rank order).
  std::vector<int> KillRanksOnAgentLocked(Job& job, const std::string& agent_id,
                                          const std::string& error) REQUIRES(mu_);
  void ChangedLocked(Job& job, bool marker) REQUIRES(mu_);
  void PruneLocked() REQUIRES(mu_);

  const JobManagerOptions options_;
  AgentRegistry* const agents_;
  KvStore* const store_;

  mutable std::mutex mu_;
  std::vector<JobPtr> jobs_ GUARDED_BY(mu_);  // submit order
  std::map<std::string, JobPtr> by_id_ GUARDED_BY(mu_);
  bool shutdown_ GUARDED_BY(mu_) = false;
  bool watches_closed_ GUARDED_BY(mu_) = false;
  std::condition_variable finished_cv_;      // a job finished
  bool scheduling_ GUARDED_BY(mu_) = false;  // ScheduleLocked is on the stack
  Clock::time_point persist_error_logged_ GUARDED_BY(mu_);
  bool reschedule_ GUARDED_BY(mu_) = false;  // ... and something it depends on changed

  StdinRelay stdin_relay_;  // its own lock; never called with mu_ held

  // Separate so rendezvous authentication never waits behind job bookkeeping.
  mutable std::mutex secrets_mu_;
  std::map<std::string, std::string> secrets_ GUARDED_BY(secrets_mu_);  // job id -> secret
};

// Every agent with its slots_in_use filled from the jobs' live ranks (ListAgents, /v1/agents).
std::vector<AgentInfo> AgentsWithSlotsInUse(const AgentRegistry& agents, const JobManager& jobs);

}  // namespace hvd::launcherd
