// The ranks running on this agent: one RankRunner each, keyed by (job, attempt, rank). Starts them
// from RankSpecs (StartRank, translated by launcher_client.h), stops jobs, and reports every state
// change (RUNNING, FAILED_TO_START, EXITED, KILLED) and every output line to the Outbox.
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "agent/cgroup.h"
#include "agent/outbox.h"
#include "agent/pid_records.h"
#include "agent/rank_runner.h"
#include "agent/rank_spec.h"
#include "base/mutex.h"

namespace hvd::agent {

struct WorkersOptions {
  // The CUDA device ids slots map onto (empty: no CUDA_VISIBLE_DEVICES is set); which a rank sees:
  // CudaVisibleDevicesFor (host_info.h).
  std::vector<std::string> gpus;
  // The binary that runs the worker wrapper (RankRunnerOptions::wrapper).
  std::string wrapper = "/proc/self/exe";
  // Where each rank gets its cgroup; null: none (process groups and the wrapper only).
  std::shared_ptr<const CgroupTree> cgroups;
  // <state-dir>/workers; empty: no records.
  std::string records_dir;
  // Feeds the stdin of a rank whose spec says forward_stdin (stdin_feed.h); unset: such a rank
  // reads /dev/null.
  std::function<std::unique_ptr<StdinFeed>(const RankSpec& rank, int write_fd)> stdin_feed;
  // --run-as: whether a job may run ranks as root (hvd-agent --allow-run-as-root), and the host
  // name its refusals name ("": base::LocalHostName()).
  bool allow_run_as_root = false;
  std::string host = "";
  // --tls-ca's PEM: what ranks check an hvds:// launcher's certificate with (HVD_RENDEZVOUS_CA).
  std::string rendezvous_ca_pem;
  // --tls-crl's PEM ("": none): a launcher certificate it revokes is refused (HVD_RENDEZVOUS_CRL).
  std::string rendezvous_crl_pem;
};

class Workers {
 public:
  Workers(Outbox* outbox, WorkersOptions options)
      : outbox_(outbox), options_(std::move(options)), records_(options_.records_dir) {}
  ~Workers();  // Shutdown(0, ...)

  // Starts a rank; its RUNNING or FAILED_TO_START event goes to the outbox. A rank that already
  // runs (a command repeated after a reconnect) is reported again, not started twice. Blocks
  // until the rank's program has been exec'd (or failed to be).
  void StartRank(const RankSpec& cmd);
  // StartRank on a thread of its own, so that the ranks of a job start side by side: each start
  // waits ~10 ms for its wrapper to exec the program, which one after another adds up to a
  // noticeable part of `hvdrun -np N`'s launch time. A StopJob for the job while the rank starts
  // stops it as soon as it runs.
  void StartRankAsync(const RankSpec& cmd);
  // `first_signal` (0: SIGTERM) to every process of the job now, SIGKILL after `grace`. `reason`
  // becomes the KILLED events' error. Returns how many ranks were asked to stop (0: none of that
  // job runs here). Repeated, it can only hasten the SIGKILL (grace 0: now).
  int StopJob(const std::string& job_id, std::chrono::milliseconds grace, const std::string& reason,
              int first_signal = 0);
  // StopJob for ranks `ranks` of the job's attempt `attempt` only (an elastic job's hung
  // worker): the job's other ranks go on.
  int StopRanks(const std::string& job_id, int attempt, const std::vector<int>& ranks,
                std::chrono::milliseconds grace, const std::string& reason, int first_signal = 0);
  // `signal` to the processes of ranks `ranks` of the job's attempt `attempt` that catch it
  // (stack_dump.h: a stalled rank's stacks). Per rank found running here, the pids it was sent to
  // (empty: no process of that rank catches it). Each rank's outcome is logged with `reason`.
  std::map<int, std::vector<pid_t>> DumpStacks(const std::string& job_id, int attempt,
                                               const std::vector<int>& ranks, int signal,
                                               const std::string& reason);
  // Jobs with a process still running and not yet asked to stop, with their rank counts.
  std::map<std::string, int> UnstoppedJobs() const;
  // Jobs with a live process, or one being started (heartbeat's running_jobs).
  std::vector<std::string> RunningJobs() const;
  int live_count() const;
  // Destroys runners whose process is reaped and reported (their threads are done).
  void Reap();
  // Refuses new ranks from now on, stops every rank with `grace`, waits until all are reaped.
  void Shutdown(std::chrono::milliseconds grace, const std::string& reason);

 private:
  using Key = std::tuple<std::string, int, int>;  // job, attempt, rank
  struct Entry {
    std::unique_ptr<RankRunner> runner;
    bool stop_requested = false;
  };
  void Report(const RankSpec& cmd, control::RankState state, int pid, const std::string& error);
  // Registers the start in starting_; false (after reporting why, if needed) when the rank must
  // not be started: the agent shuts down, the rank already starts or runs.
  bool ClaimStart(const RankSpec& cmd);
  // Spawns a claimed rank and moves it from starting_ to entries_.
  void Spawn(const RankSpec& cmd);
  // Joins the StartRankAsync threads that have finished (all of them when `all`: each ends when
  // its Spawn does, bounded by the wrapper's start timeout).
  void JoinStarters(bool all);

  // StopJob and StopRanks: the job's ranks that `select` takes.
  int Stop(const std::string& job_id, const std::function<bool(const Key&)>& select,
           std::chrono::milliseconds grace, const std::string& reason, int first_signal);

  struct StopRequest {
    std::chrono::milliseconds grace{0};
    std::string reason;
    int first_signal = SIGTERM;
  };

  Outbox* const outbox_;
  const WorkersOptions options_;
  const PidRecords records_;
  mutable base::Mutex mu_;
  base::CondVar cv_;  // starting_ shrank
  std::map<Key, Entry> entries_ HVD_GUARDED_BY(mu_);
  std::set<Key> starting_ HVD_GUARDED_BY(mu_);  // StartRank in progress (outside mu_)
  // Why hvd stopped a rank, for its KILLED event.
  std::map<Key, std::string> stop_reasons_ HVD_GUARDED_BY(mu_);
  // StopJob reached a rank in starting_.
  std::map<Key, StopRequest> stop_while_starting_ HVD_GUARDED_BY(mu_);
  bool shutting_down_ HVD_GUARDED_BY(mu_) = false;

  struct Starter {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  base::Mutex starters_mu_;  // never held while taking mu_, nor by a starter thread
  std::vector<Starter> starters_ HVD_GUARDED_BY(starters_mu_);
};

}  // namespace hvd::agent
