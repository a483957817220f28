#include "agent/workers.h"

#include <csignal>

#include "agent/host_info.h"
#include "agent/stack_dump.h"
#include "agent/worker_wrapper.h"
#include "base/clock.h"
#include "base/logging.h"
#include "base/net.h"
#include "control/job_model.h"

namespace hvd::agent {

Workers::~Workers() {
  Shutdown(std::chrono::milliseconds(0), "hvd-agent is shutting down");
}

void Workers::Report(const RankSpec& cmd, control::RankState state, int pid,
                     const std::string& error) {
  RankReport e;
  e.job_id = cmd.job_id;
  e.attempt = cmd.attempt;
  e.rank = cmd.rank;
  e.state = state;
  e.pid = pid;
  e.error = error;
  outbox_->AddEvent(e);
}

bool Workers::ClaimStart(const RankSpec& cmd) {
  const Key key{cmd.job_id, cmd.attempt, cmd.rank};
  std::unique_ptr<RankRunner> previous;  // a finished runner under the same key
  {
    base::MutexLock lock(&mu_);
    if (shutting_down_) {
      Report(cmd, control::RankState::kFailedToStart, 0,
             "hvd-agent on " + base::LocalHostName() + " is shutting down");
      return false;
    }
    if (starting_.count(key) != 0) return false;
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      if (!it->second.runner->done()) {
        Report(cmd, control::RankState::kRunning, it->second.runner->pid(), "");
        return false;
      }
      previous = std::move(it->second.runner);
      entries_.erase(it);
    }
    starting_.insert(key);
  }
  // Destroyed outside the lock: joining a runner's thread must not wait on anything we hold.
  previous.reset();
  return true;
}

void Workers::StartRank(const RankSpec& cmd) {
  if (ClaimStart(cmd)) Spawn(cmd);
}

void Workers::StartRankAsync(const RankSpec& cmd) {
  JoinStarters(/*all=*/false);
  // Claimed here, in command order: a StopJob read after this command finds the rank in
  // starting_ even if its thread has not run yet.
  if (!ClaimStart(cmd)) return;
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread t([this, cmd, done] {
    Spawn(cmd);
    done->store(true);
  });
  base::MutexLock lock(&starters_mu_);
  starters_.push_back({std::move(t), std::move(done)});
}

void Workers::Spawn(const RankSpec& cmd) {
  const std::string job = cmd.job_id;
  const int attempt = cmd.attempt;
  const int rank = cmd.rank;
  const Key key{job, attempt, rank};
  RankRunnerOptions o;
  o.argv = cmd.argv;
  o.env = cmd.env;
  // The agent owns the GPUs of its slots; the launcher's environment cannot know which is which.
  // Isolated, the slot's GPU is the rank's only one, whatever the job says; shared (the
  // default), a CUDA_VISIBLE_DEVICES the job sets itself (-x) is the user's choice and stays.
  std::string gpus;
  if (CudaVisibleDevicesFor(options_.gpus, cmd.slot, cmd.local_rank, cmd.gpu_isolation, &gpus) &&
      (cmd.gpu_isolation || o.env.count("CUDA_VISIBLE_DEVICES") == 0)) {
    o.env["CUDA_VISIBLE_DEVICES"] = gpus;
  }
  // An hvds:// rendezvous: the rank checks the launcher's certificate against the CA this agent
  // checks it with (--tls-ca); the job's environment cannot substitute another.
  if (auto rv = o.env.find("HVD_RENDEZVOUS");
      rv != o.env.end() && rv->second.rfind("hvds://", 0) == 0) {
    o.env["HVD_RENDEZVOUS_CA"] = options_.rendezvous_ca_pem;
    if (options_.rendezvous_crl_pem.empty()) {
      o.env.erase("HVD_RENDEZVOUS_CRL");
    } else {
      o.env["HVD_RENDEZVOUS_CRL"] = options_.rendezvous_crl_pem;
    }
  }
  o.working_dir = cmd.working_dir;
  o.wrapper = options_.wrapper;
  o.run_as = cmd.run_as;
  if (cmd.forward_stdin && options_.stdin_feed) {
    o.stdin_feed = [feed = options_.stdin_feed, cmd](int fd) { return feed(cmd, fd); };
  }
  if (options_.cgroups != nullptr) {
    Status cs = options_.cgroups->CreateRankDir(job, attempt, rank, &o.cgroup_dir);
    if (!cs.ok()) {
      HVD_LOG(WARNING) << "job " << job << " rank " << rank
                       << " runs without a cgroup: " << cs.message();
      o.cgroup_dir.clear();
    }
  }
  o.on_started = [this, cmd, cgroup = o.cgroup_dir](int pid, int wrapper_pid) {
    WorkerRecord r;
    r.job = cmd.job_id;
    r.attempt = cmd.attempt;
    r.rank = cmd.rank;
    r.wrapper_pid = wrapper_pid;
    r.wrapper_start = ProcessStartTime(wrapper_pid);
    r.worker_pid = pid;
    r.worker_start = ProcessStartTime(pid);
    r.cgroup_dir = cgroup;
    records_.Write(r);
    Report(cmd, control::RankState::kRunning, pid, "");
  };
  o.on_output = [this, job, rank](bool is_stderr, std::string line) {
    outbox_->AddLine(job, rank, is_stderr, std::move(line));
  };
  o.on_exit = [this, key, job, attempt, rank](const RankExit& x) {
    records_.Remove(job, attempt, rank);
    RankReport e;
    {
      base::MutexLock lock(&mu_);
      auto it = stop_reasons_.find(key);
      if (it != stop_reasons_.end()) {
        if (x.stopped) e.error = it->second;
        stop_reasons_.erase(it);
      }
    }
    e.job_id = job;
    e.attempt = attempt;
    e.rank = rank;
    e.state = x.stopped ? control::RankState::kKilled : control::RankState::kExited;
    e.pid = x.pid;
    e.time_ms = x.time_ms > 0 ? x.time_ms : base::WallMs();
    e.exit_code = x.exit_code;
    e.signal = x.signal;
    e.stderr_tail = x.stderr_tail;
    outbox_->AddEvent(e);
    HVD_LOG(INFO) << "job " << job << " rank " << rank << " (pid " << x.pid << ") "
                  << (x.signal != 0 ? "killed by signal " + std::to_string(x.signal)
                                    : "exited with code " + std::to_string(x.exit_code))
                  << (x.stopped ? " after a stop request" : "");
  };
  const std::string cgroup_dir = o.cgroup_dir;
  std::unique_ptr<RankRunner> runner;
  // --run-as refusals (not root, unknown user, root not allowed) before anything is spawned.
  Status s = cmd.run_as.empty()
                 ? Status::OK()
                 : CheckRunAs(cmd.run_as, options_.allow_run_as_root,
                              options_.host.empty() ? base::LocalHostName() : options_.host);
  if (s.ok()) s = RankRunner::Start(std::move(o), &runner);
  if (s.ok()) {
    HVD_LOG(INFO) << "job " << job << " rank " << rank << " started: pid " << runner->pid();
  } else {
    HVD_LOG(WARNING) << "job " << job << " rank " << rank << " failed to start: " << s.message();
    if (!cgroup_dir.empty()) options_.cgroups->RemoveRankDir(cgroup_dir);
    Report(cmd, control::RankState::kFailedToStart, 0, s.message());
  }
  base::MutexLock lock(&mu_);
  starting_.erase(key);
  auto stop = stop_while_starting_.find(key);
  if (runner != nullptr) {
    Entry& entry = entries_[key];
    entry.runner = std::move(runner);
    if (stop != stop_while_starting_.end()) {
      // StopJob came while this rank was starting: it counted the rank, so stop it now.
      stop_reasons_.emplace(key, stop->second.reason);
      entry.runner->RequestStop(stop->second.grace, stop->second.first_signal);
      entry.stop_requested = true;
    }
  }
  if (stop != stop_while_starting_.end()) stop_while_starting_.erase(stop);
  cv_.NotifyAll();
}

void Workers::JoinStarters(bool all) {
  std::vector<Starter> finished;
  {
    base::MutexLock lock(&starters_mu_);
    for (auto it = starters_.begin(); it != starters_.end();) {
      if (all || it->done->load()) {
        finished.push_back(std::move(*it));
        it = starters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Starter& s : finished) s.thread.join();
}

int Workers::StopJob(const std::string& job_id, std::chrono::milliseconds grace,
                     const std::string& reason, int first_signal) {
  return Stop(
      job_id, [](const Key&) { return true; }, grace, reason, first_signal);
}

int Workers::StopRanks(const std::string& job_id, int attempt, const std::vector<int>& ranks,
                       std::chrono::milliseconds grace, const std::string& reason,
                       int first_signal) {
  const std::set<int> chosen(ranks.begin(), ranks.end());
  return Stop(
      job_id,
      [&](const Key& key) { return std::get<1>(key) == attempt && chosen.count(std::get<2>(key)); },
      grace, reason, first_signal);
}

int Workers::Stop(const std::string& job_id, const std::function<bool(const Key&)>& select,
                  std::chrono::milliseconds grace, const std::string& reason, int first_signal) {
  if (grace.count() < 0) grace = std::chrono::milliseconds(0);
  // Only the signals a launcher passes on (launcher_service.cc checks them too).
  if (first_signal != SIGINT && first_signal != SIGHUP && first_signal != SIGKILL) {
    first_signal = SIGTERM;
  }
  base::MutexLock lock(&mu_);
  int n = 0;
  for (auto& [key, entry] : entries_) {
    if (std::get<0>(key) != job_id || !select(key) || entry.runner->done()) continue;
    if (!entry.stop_requested) stop_reasons_[key] = reason;  // the first reason stands
    entry.runner->RequestStop(grace, first_signal);
    entry.stop_requested = true;
    ++n;
  }
  for (const Key& key : starting_) {
    if (std::get<0>(key) != job_id || !select(key)) continue;
    // StartRank applies it.
    stop_while_starting_.emplace(key, StopRequest{grace, reason, first_signal});
    ++n;
  }
  return n;
}

std::map<int, std::vector<pid_t>> Workers::DumpStacks(const std::string& job_id, int attempt,
                                                      const std::vector<int>& ranks, int signal,
                                                      const std::string& reason) {
  // Only the signal hvd.torch registers: any other (SIGINT, which every Python rank catches) would
  // do what it does, not show a stack.
  if (signal != control::kStackDumpSignal) {
    HVD_LOG(WARNING) << "job " << job_id << ": a stack dump with signal " << signal
                     << " was refused (only " << control::kStackDumpSignal << ")";
    return {};
  }
  const std::set<int> chosen(ranks.begin(), ranks.end());
  std::map<int, pid_t> leaders;
  {
    base::MutexLock lock(&mu_);
    for (const auto& [key, entry] : entries_) {
      const auto& [job, att, rank] = key;
      // Not a rank being stopped: its interpreter may be putting the default action back.
      if (job != job_id || att != attempt || !chosen.count(rank) || entry.stop_requested ||
          entry.runner->done()) {
        continue;
      }
      if (entry.runner->pid() > 0) leaders[rank] = entry.runner->pid();
    }
  }
  std::map<int, std::vector<pid_t>> sent;  // /proc is scanned without the lock
  for (const auto& [rank, leader] : leaders) {
    std::vector<pid_t>& pids = sent[rank] = SendStackDump(leader, signal);
    if (pids.empty()) {
      HVD_LOG(INFO) << "job " << job_id << ": rank " << rank << " was asked for its stacks ("
                    << reason << "), but no process of it catches signal " << signal
                    << " (hvd.torch registers it; a program without it is left alone)";
      continue;
    }
    std::string list;
    for (pid_t pid : pids) list += (list.empty() ? "" : ", ") + std::to_string(pid);
    HVD_LOG(INFO) << "job " << job_id << ": asked rank " << rank << " (pid " << list
                  << ") for its stacks: " << reason;
  }
  return sent;
}

std::map<std::string, int> Workers::UnstoppedJobs() const {
  base::MutexLock lock(&mu_);
  std::map<std::string, int> jobs;
  for (const auto& [key, entry] : entries_) {
    if (!entry.stop_requested && !entry.runner->done()) ++jobs[std::get<0>(key)];
  }
  return jobs;
}

std::vector<std::string> Workers::RunningJobs() const {
  base::MutexLock lock(&mu_);
  // Ranks still being started count: the launcher takes a job missing here as gone.
  std::set<std::string> jobs;
  for (const Key& key : starting_) jobs.insert(std::get<0>(key));
  for (const auto& [key, entry] : entries_) {
    if (!entry.runner->done()) jobs.insert(std::get<0>(key));
  }
  return {jobs.begin(), jobs.end()};
}

int Workers::live_count() const {
  base::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [key, entry] : entries_) n += entry.runner->done() ? 0 : 1;
  return n;
}

void Workers::Reap() {
  std::vector<std::unique_ptr<RankRunner>> done;
  {
    base::MutexLock lock(&mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.runner->done()) {
        done.push_back(std::move(it->second.runner));
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Destroyed outside the lock: joining a runner's thread must not wait on anything we hold.
}

void Workers::Shutdown(std::chrono::milliseconds grace, const std::string& reason) {
  std::map<Key, Entry> all;
  {
    base::MutexLock lock(&mu_);
    shutting_down_ = true;
    cv_.Wait(lock, [&]() HVD_REQUIRES(mu_) { return starting_.empty(); });
    all.swap(entries_);
    for (auto& [key, entry] : all) {
      if (!entry.stop_requested) stop_reasons_[key] = reason;
    }
  }
  for (auto& [key, entry] : all) entry.runner->RequestStop(grace);
  for (auto& [key, entry] : all) entry.runner->Stop(grace);  // waits until reaped and reported
  // Every claimed start has finished (starting_ was empty): their threads are ending.
  JoinStarters(/*all=*/true);
}

}  // namespace hvd::agent
