// The job table and each job's life (docs/control-plane.md): submit -> PENDING (with the reason)
// -> placement -> StartRank to agents -> STARTING -> RUNNING -> SUCCEEDED / FAILED / CANCELLED,
// teardown (StopJob) and cleanup (rendezvous keys, secret). Thread-safe; every entry point is a
// plain C++ call (the gRPC services and the HTTP server translate to and from it).
//
// JobManager is a facade: it takes its one lock and calls the parts, each of which holds no lock
// and is tested on its own:
//   Job (job.h)              a job's record, state transitions, restarts and the choice of cause;
//   JobTable (job_table.h)   ids, submit order, lookup, pruning, persistence through the JobStore;
//   Scheduler (job_scheduler.h)  placement, the network check, MASTER_PORT and the start;
//   Supervisor (job_supervision.h)  the timers Tick() runs;
//   JobWatch (job_watch.h)   WatchJob's fan-out and the condition variables.
// What the facade itself does is the glue: after a job changed it "settles" it (sends the StopJob
// commands the job asked for, starts its next attempt, finishes it: secret forgotten, keys erased,
// table pruned) and schedules again.
//
// Choices:
//  - Queueing: pending jobs are retried in submit order whenever agents register, slots free up or
//    agents are lost; a job that does not fit yet does not hold back later ones that do (first
//    fit, so a large job can wait while small ones keep starting).
//  - A job is "finished" once it is terminal and none of its ranks is STARTING or RUNNING any more.
//    Only then are its rendezvous keys erased, its secret forgotten, and WatchJob's stream ended.
//  - The first failure is the cause (job.h); with max_restarts, a failure instead ends the
//    attempt: RESTARTING until its ranks are gone, then PENDING as attempt n+1
//    (control/restart_policy.h), the cause kept in previous_failures.
//  - With a JobStore every change is written, batched (job_table.h: state changes at once, rank
//    events at the next Tick), and Restore() reloads the table after a restart; restored jobs
//    wait for their agents to re-register and say what still runs (job_recovery.cc).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "control/restart_policy.h"
#include "launcherd/agent_registry.h"
#include "launcherd/agent_report.h"
#include "launcherd/job.h"
#include "launcherd/job_scheduler.h"
#include "launcherd/job_store.h"
#include "launcherd/job_supervision.h"
#include "launcherd/job_table.h"
#include "launcherd/job_types.h"
#include "launcherd/job_watch.h"
#include "launcherd/jobs_snapshot.h"
#include "launcherd/kv_store.h"
#include "launcherd/stdin_relay.h"

namespace hvd::launcherd {

class NetworkCheck;

struct JobManagerOptions {
  std::string rendezvous_address;  // "host:port" of the runtime's endpoint (HVD_RENDEZVOUS)
  bool rendezvous_tls = false;     // the endpoint speaks TLS: ranks dial hvds://
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
  // No agent will register but those here now and their reconnections (hvdrun's local mode: its
  // own agent): an elastic job below --min-np with no slot left it could use fails at once.
  bool closed_cluster = false;
};

class JobManager {
 public:
  // `agents` and `store` must outlive the manager.
  JobManager(JobManagerOptions options, AgentRegistry* agents, KvStore* store);
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Validates, assigns an id and a secret, queues the job and tries to place it at once.
  Status Submit(const JobSpec& spec, std::string* id) HVD_EXCLUDES(mu_);
  Status Get(const std::string& id, JobStatus* out) const HVD_EXCLUDES(mu_);
  // Every job in submit order, without its ranks (GetJob has them): a list of hundreds of large
  // jobs must stay small enough for one gRPC message.
  std::vector<JobStatus> List() const HVD_EXCLUDES(mu_);
  // One page of the jobs in submit order, for ListJobs: from the job after `after_id` (empty: the
  // first job; an id no longer kept: the first job submitted after `after_submit_ms`), `take` is
  // called with each job under the manager's lock until it returns false (it did not take that
  // job: the page is full). *more: jobs remain after the page. `take` must not call back in.
  void ListPage(const std::string& after_id, int64_t after_submit_ms,
                const std::function<bool(const JobStatus&)>& take, bool* more) const
      HVD_EXCLUDES(mu_);
  // Cancels a job that has not ended (CANCELLED, StopJob to its agents); an ended job is left as
  // it is. *state is the job's state afterwards. `signal` is the first signal its ranks get (0:
  // SIGTERM; hvdrun passes on the SIGINT or SIGHUP it received). SIGKILL on a job that has ended
  // but whose ranks still run kills them now instead (hvdrun's second Ctrl-C).
  Status Cancel(const std::string& id, const std::string& reason, JobState* state, int signal = 0)
      HVD_EXCLUDES(mu_);
  // Asks ranks of a running job for their stacks (Launcher.DumpStacks): `ranks` empty, every rank
  // that runs. *asked: those asked (the ones running).
  Status DumpStacks(const std::string& id, const std::vector<int>& ranks, const std::string& why,
                    std::vector<int>* asked) HVD_EXCLUDES(mu_);

  // An elastic job's hosts from hvdrun's --host-discovery-script: checked as -H is, then the
  // job's host list (Scheduler::Grow starts workers on new ones; ShrinkLocked stops those beyond
  // it). NotFound, or
  // FailedPrecondition for a fixed or ended job.
  Status UpdateHosts(const std::string& id, const std::vector<control::HostRequest>& hosts)
      HVD_EXCLUDES(mu_);

  // WatchJob's source. With from_seq 0: the job's history in the order it happened (a status
  // snapshot at submission and at each state or reason change, progress messages, output lines).
  // With from_seq > 0 (resuming a broken watch): the current status, then the output from
  // from_seq. Then, with `follow`, what happens next: later calls block up to `wait` for it.
  // *done becomes true when nothing more will come (the job finished and all was yielded; without
  // `follow`, the history was yielded; or CloseWatches() was called); the last event is then
  // always the job's newest status.
  Status NextEvents(const std::string& id, int64_t from_seq, bool follow,
                    std::chrono::milliseconds wait, WatchCursor* cursor,
                    std::vector<JobEvent>* events, bool* done) HVD_EXCLUDES(mu_);

  // Retries placement of pending jobs (after agents registered or slots freed).
  void Schedule() HVD_EXCLUDES(mu_);
  // From agents (job_events.cc).
  void OnRankEvent(const std::string& agent_id, const RankEventReport& event) HVD_EXCLUDES(mu_);
  void OnOutput(const std::string& agent_id, const std::string& job_id,
                std::vector<OutputLine> lines) HVD_EXCLUDES(mu_);
  void OnHeartbeat(const std::string& agent_id, const std::vector<std::string>& running_jobs)
      HVD_EXCLUDES(mu_);
  void OnAgentLost(const AgentInfo& agent) HVD_EXCLUDES(mu_);
  // What one stream of the agent sent, in order, under one acquisition of the lock (job_inbox.cc):
  // the AgentGateway's applier calls it so that a stream's reader never waits for this lock.
  // Reports from a stream that is no longer the agent's current one (`link` was replaced by a
  // re-registration, or the stream ended) are dropped. Returns how many reports, from the front of
  // `batch`, were applied (the rest came from a superseded stream).
  size_t OnAgentReports(const std::string& agent_id, const AgentLink* link,
                        std::vector<AgentReport> batch) HVD_EXCLUDES(mu_);
  // The agent's stream dropped (it crashed, or its host or the network went): not LOST yet (it may
  // reconnect within the lease), but a failing job with ranks there names "agent on <host> lost"
  // as its cause instead of a rank that died because its peer vanished (job_events.cc).
  // `stopped`: the agent had said goodbye (its record as it stopped), else null.
  void OnAgentDisconnected(const std::string& agent_id, const AgentInfo* stopped = nullptr)
      HVD_EXCLUDES(mu_);
  // An agent's answer to a MasterPortRequest (job_master_port.cc).
  void OnMasterPort(const std::string& agent_id, const MasterPortAnswer& answer) HVD_EXCLUDES(mu_);
  // The agent (re-)registered: after a reconnect, a restart of the agent or of the launcher, its
  // first heartbeat decides which of the ranks placed on it still run; the others ended while it
  // was out of touch and are reported as such (job_recovery.cc).
  void OnAgentRegistered(const std::string& agent_id) HVD_EXCLUDES(mu_);

  // Reloads the table from options.job_store (call once, before agents connect). Jobs that had
  // ranks running wait for those agents; `expected` gets each such agent (id and host) so the
  // registry can declare it lost if it does not come back within the lease.
  Status Restore(std::vector<AgentInfo>* expected) HVD_EXCLUDES(mu_);
  // A key the runtime wrote to the rendezvous store (KvStore's observer): a rank reaching the
  // rendezvous ("job/<id>/attempt/<n>/host/<rank>") or a stall report (".../stall/<rank>").
  void OnRendezvousKey(const std::string& key, const std::string& value) HVD_EXCLUDES(mu_);
  // An attached client started or stopped following the job (WatchJob with attach).
  void WatchStarted(const std::string& id) HVD_EXCLUDES(mu_);
  void WatchEnded(const std::string& id) HVD_EXCLUDES(mu_);
  // Runs the timers: start and stall timeouts, attached clients gone, delayed restarts. Called
  // often (the launcher's sweeper, every lease/10).
  void Tick() HVD_EXCLUDES(mu_);
  // What the agents' inbox has read but not applied yet (AgentGatewayService sets it, and clears
  // it with null before the inbox goes): a MASTER_PORT deadline does not fail a job whose answer
  // may be waiting there. Called under the manager's lock; must not call back in.
  void SetAgentBacklog(AgentBacklog backlog) HVD_EXCLUDES(mu_);

  // The SecretResolver of the rendezvous endpoints: a live job's secret -> "job/<id>/".
  bool ResolveSecret(const std::string& secret, std::string* prefix) const;

  JobCounts Counts() const HVD_EXCLUDES(mu_);

  // The jobs as last published (jobs_snapshot.h): what REST, metrics and the gRPC reads answer
  // from, without waiting for the lock. Up to kPublishInterval old while the manager is busy;
  // when the lock is free a stale snapshot is refreshed first, so an idle manager answers with
  // every change made.
  std::shared_ptr<const JobsSnapshot> Snapshot() const HVD_EXCLUDES(mu_);
  // One job for a reader (GET /v1/jobs/{id}, GetJob): as last published, or, when it is not
  // published yet, the manager's own record, with Get's error when there is none.
  Status GetPublished(const std::string& id, std::shared_ptr<const JobStatus>* out) const
      HVD_EXCLUDES(mu_);
  // Publishes a snapshot now (after Restore).
  void Publish() HVD_EXCLUDES(mu_);

  // hvdrun's standard input on its way to each job's stdin rank (stdin_service.h).
  StdinRelay& stdin_relay() { return stdin_relay_; }

  // Refuses new jobs and cancels every job that has not ended (StopJob to agents). Idempotent.
  void Shutdown(const std::string& reason) HVD_EXCLUDES(mu_);
  // Waits up to `timeout` until no job has a rank left; true when none has.
  bool WaitRanksGone(std::chrono::milliseconds timeout) HVD_EXCLUDES(mu_);
  // Ends every watch (after their last events). Idempotent.
  void CloseWatches() HVD_EXCLUDES(mu_);

 private:
  // The agents' reports that change a job, and what follows (job_events.cc).
  // After a job changed: its stops sent, a held cause released once no rank is left, its next
  // attempt started, or its end completed; then placement runs again (slots may have freed).
  void SettleLocked(Job& job) HVD_REQUIRES(mu_);
  // job.End / job.Fail, then SettleLocked.
  void EndLocked(Job& job, JobState to, const std::string& reason, int exit_code) HVD_REQUIRES(mu_);
  void FailLocked(Job& job, const JobFailure& failure, int exit_code) HVD_REQUIRES(mu_);
  // Sends the StopJob commands the job asked for; a disconnected agent gets it when it
  // reconnects and lists the job (OnHeartbeat).
  // Elastic RUNNING jobs below --max-np get workers on free slots (Scheduler::Grow).
  // `force`: the supervisor's tick, not rate limited.
  void GrowLocked(bool force) HVD_REQUIRES(mu_);
  // With closed_cluster: fails each elastic job below --min-np that no worker can ever join
  // (Scheduler::CouldGrow) rather than letting it wait --elastic-timeout for nothing.
  void FailStrandedLocked() HVD_REQUIRES(mu_);
  // Stops the workers beyond an elastic job's host list (Job::WorkersBeyondHosts, ShrinkTo).
  void ShrinkLocked(Job& job) HVD_REQUIRES(mu_);
  // An elastic job's new generations, into the rendezvous store (job.h TakePublications).
  void PublishMembershipLocked(Job& job) HVD_REQUIRES(mu_);
  void SendStopsLocked(Job& job) HVD_REQUIRES(mu_);
  // The StackDump commands the job asked for (Job::AskForStacks).
  void SendStackDumpsLocked(Job& job) HVD_REQUIRES(mu_);
  // The bodies of OnRankEvent, OnOutput, OnHeartbeat and OnMasterPort, for OnAgentReports.
  void OnRankEventLocked(const std::string& agent_id, const RankEventReport& event)
      HVD_REQUIRES(mu_);
  void OnOutputLocked(const std::string& agent_id, const std::string& job_id,
                      std::vector<OutputLine> lines) HVD_REQUIRES(mu_);
  void OnHeartbeatLocked(const std::string& agent_id, const std::vector<std::string>& running_jobs)
      HVD_REQUIRES(mu_);
  void OnMasterPortLocked(const std::string& agent_id, const MasterPortAnswer& answer)
      HVD_REQUIRES(mu_);
  // The agent is gone (lost at its lease, or stopped: its goodbye, at its stream's end): its
  // ranks still live in the launcher's view are ended, and their jobs fail (or, elastic, go on
  // without them).
  void OnAgentGoneLocked(const AgentInfo& agent, bool stopped) HVD_REQUIRES(mu_);
  // Passes of the scheduler over the pending jobs, in submit order (job_manager.cc).
  void ScheduleLocked() HVD_REQUIRES(mu_);
  // A new Job, observed by the table (persistence) and the watchers.
  JobPtr NewJobLocked() HVD_REQUIRES(mu_);
  void ReconcileUnconfirmedLocked(const std::string& agent_id, const std::set<std::string>& running)
      HVD_REQUIRES(mu_);
  bool Connected(const std::string& agent_id) const { return agents_->Link(agent_id) != nullptr; }

  const JobManagerOptions options_;
  const JobRules rules_;
  AgentRegistry* const agents_;
  KvStore* const store_;

  mutable base::Mutex mu_;
  JobTable table_ HVD_GUARDED_BY(mu_);
  Scheduler scheduler_ HVD_GUARDED_BY(mu_);
  const Supervisor supervisor_;
  JobWatch watch_ HVD_GUARDED_BY(mu_);
  bool shutdown_ HVD_GUARDED_BY(mu_) = false;
  bool scheduling_ HVD_GUARDED_BY(mu_) = false;  // ScheduleLocked is on the stack
  std::chrono::steady_clock::time_point last_growth_pass_ HVD_GUARDED_BY(mu_);
  bool reschedule_ HVD_GUARDED_BY(mu_) = false;  // ... and something it depends on changed

  StdinRelay stdin_relay_;  // its own lock; never called with mu_ held
  AgentBacklog backlog_ HVD_GUARDED_BY(mu_);
  JobSecrets secrets_;  // its own lock, apart from mu_

  // Builds a snapshot of the table (skipped when nothing changed) and swaps it in.
  void PublishLocked() const HVD_REQUIRES(mu_);
  mutable JobsSnapshotBuilder snapshot_builder_ HVD_GUARDED_BY(mu_);
  // Last: its thread calls PublishLocked, and stops (joined) before the rest is destroyed.
  mutable SnapshotPublisher published_;
};

// Every agent with its slots_in_use filled from the jobs' live ranks (ListAgents, /v1/agents).
std::vector<AgentInfo> AgentsWithSlotsInUse(const AgentRegistry& agents, const JobManager& jobs);

}  // namespace hvd::launcherd
