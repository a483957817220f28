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
//    kills are recorded on their ranks but change nothing else.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "launcherd/agent_registry.h"
#include "launcherd/job_log.h"
#include "launcherd/job_types.h"
#include "launcherd/kv_store.h"

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
  NetworkCheck* network = nullptr;      // checks a multi-host job's network first (null: never)
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
  // Cancels a job that has not ended (CANCELLED, StopJob to its agents); an ended job is left as
  // it is. *state is the job's state afterwards.
  Status Cancel(const std::string& id, const std::string& reason, JobState* state);

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

  // The SecretResolver of the rendezvous endpoints: a live job's secret -> "job/<id>/".
  bool ResolveSecret(const std::string& secret, std::string* prefix) const;

  JobCounts Counts() const;

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
    Clock::time_point ended_at;
    std::condition_variable cv;  // log appended, status changed, or shutdown
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
  void AddEventsLocked(Job& job, int64_t from_seq, bool follow, WatchCursor* cursor,
                       std::vector<JobEvent>* events, bool* done) REQUIRES(mu_);
  // State changes (job_events.cc).
  void SetStateLocked(Job& job, JobState to, const std::string& reason) REQUIRES(mu_);
  void FailLocked(Job& job, const JobFailure& failure, int exit_code) REQUIRES(mu_);
  void EndLocked(Job& job, JobState to, const std::string& reason, int exit_code) REQUIRES(mu_);
  void StopAgentsLocked(Job& job, const std::string& reason) REQUIRES(mu_);
  void RankEndedLocked(Job& job) REQUIRES(mu_);
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
  bool reschedule_ GUARDED_BY(mu_) = false;  // ... and something it depends on changed

  // Separate so rendezvous authentication never waits behind job bookkeeping.
  mutable std::mutex secrets_mu_;
  std::map<std::string, std::string> secrets_ GUARDED_BY(secrets_mu_);  // job id -> secret
};

// Every agent with its slots_in_use filled from the jobs' live ranks (ListAgents, /v1/agents).
std::vector<AgentInfo> AgentsWithSlotsInUse(const AgentRegistry& agents, const JobManager& jobs);

}  // namespace hvd::launcherd
