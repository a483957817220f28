// `hvdrun [flags] -np N PROGRAM [ARGS...]`: run a job attached. Submits it (to an embedded
// launcher and agent, or to --launcher), prints its output tagged by rank, and exits with its exit
// code. SIGINT/SIGTERM/SIGHUP cancel the job, its ranks getting that same signal first (as under
// torchrun or mpirun, where a terminal's Ctrl-C reaches every worker as SIGINT), and hvdrun
// leaves only once its ranks are gone (bounded), exiting 128 + the signal like a shell job would.
// A second signal SIGKILLs the ranks at once.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <unistd.h>

#include "base/mutex.h"
#include "cli/client.h"
#include "cli/cluster_hosts.h"
#include "cli/commands.h"
#include "cli/embedded.h"
#include "cli/follow.h"
#include "cli/forward_env.h"
#include "cli/horovodrun_flags.h"
#include "cli/host_discovery.h"
#include "cli/job_format.h"
#include "cli/job_options.h"
#include "cli/output.h"
#include "cli/signals.h"
#include "cli/ssh_cluster.h"
#include "cli/stdin_forward.h"
#include "control/job_state.h"

namespace hvd::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The teardown's SIGTERM -> SIGKILL grace in local mode, and how long hvdrun waits beyond it for
// the launcher to report every rank gone after a cancel.
constexpr std::chrono::milliseconds kLocalKillGrace{5000};
constexpr std::chrono::milliseconds kCancelSlack{5000};
// After a second signal: how long the SIGKILL may take to be reported (local mode; ranks are
// gone within milliseconds), and how long its CancelJob call may take (a slow launcher must not
// hold up a user who pressed Ctrl-C twice).
constexpr std::chrono::milliseconds kKillReportWait{2000};
constexpr std::chrono::milliseconds kKillCallTimeout{2000};

// Turns the first signal into CancelJob with that signal for the ranks, a second into CancelJob
// with SIGKILL (kill them now), and interrupts the wait when the job has not ended within the
// bound, or at once after a second signal (local mode: once the SIGKILLed ranks are reported gone,
// within kKillReportWait). Runs its own thread: the signal watcher's must stay free to report the
// next signal while a CancelJob call is in flight.
// SIGQUIT (Ctrl-\) is no stop: it asks the job's ranks for their stacks (DumpStacks), each time.
class CancelOnSignal {
 public:
  CancelOnSignal(OutputSink* sink, std::chrono::milliseconds bound, bool local)
      : sink_(sink), bound_(bound), local_(local), thread_([this] { Loop(); }) {}
  ~CancelOnSignal() {
    {
      base::MutexLock lock(&mu_);
      done_ = true;
    }
    cv_.NotifyAll();
    thread_.join();
  }

  void OnSignal(int signo, int count) {
    base::MutexLock lock(&mu_);
    if (signo_ == 0) signo_ = signo;
    count_ = count;
    cv_.NotifyAll();
  }
  void OnQuit() {
    base::MutexLock lock(&mu_);
    stacks_wanted_ = true;
    cv_.NotifyAll();
  }
  // Once the job exists. A signal that came earlier cancels it now.
  void SetJob(Client* client, const std::string& job_id) {
    base::MutexLock lock(&mu_);
    client_ = client;
    job_id_ = job_id;
    cv_.NotifyAll();
  }
  // The job is over (or hvdrun gave up on it): nothing more to cancel or interrupt.
  void Done() {
    base::MutexLock lock(&mu_);
    client_ = nullptr;
    job_over_ = true;
  }
  int signo() {
    base::MutexLock lock(&mu_);
    return signo_;
  }
  // Whether a second signal had the ranks SIGKILLed.
  bool killed() {
    base::MutexLock lock(&mu_);
    return kill_sent_;
  }

 private:
  void Loop() {
    base::MutexLock lock(&mu_);
    while (!done_) {
      if (signo_ != 0 && client_ != nullptr && !cancel_sent_) {
        cancel_sent_ = true;
        deadline_ = Clock::now() + bound_;
        Client* client = client_;
        const std::string id = job_id_;
        const std::string sig = control::SignalName(signo_);
        const int signo = signo_;
        lock.Unlock();
        sink_->Message("hvdrun: " + sig + ": cancelling job " + id + "; its ranks get " + sig +
                       ", then SIGKILL; waiting up to " + std::to_string(bound_.count() / 1000) +
                       " s for them to end (signal again to stop them now)");
        control::JobState state;
        Status s = client->Cancel(id, "hvdrun received " + sig, &state, signo);
        if (!s.ok()) sink_->Message("hvdrun: cancelling job " + id + " failed: " + s.message());
        lock.Lock();
        continue;
      }
      if (count_ >= 2 && cancel_sent_ && client_ != nullptr && !kill_sent_) {
        kill_sent_ = true;
        // Local mode waits (briefly) for the ranks to be reported gone, so that hvdrun still
        // prints their last output and the job's end; a cluster may be slow to answer: no wait.
        deadline_ = std::min(deadline_, Clock::now() + (local_ ? kKillReportWait : kZero));
        const std::string address = client_->address(), token = client_->token();
        const std::string id = job_id_;
        lock.Unlock();
        sink_->Message("hvdrun: job " + id + ": second signal: stopping its ranks now (SIGKILL)");
        Client killer(address, token, kKillCallTimeout);
        control::JobState state;
        Status s = killer.Cancel(id, "hvdrun received a second signal", &state, SIGKILL);
        if (!s.ok())
          sink_->Message("hvdrun: killing job " + id + "'s ranks failed: " + s.message());
        lock.Lock();
        continue;
      }
      // After the stop signals (a Ctrl-C never waits behind it), on a client of its own with a
      // short deadline; not once the job is being cancelled.
      if (stacks_wanted_) {
        stacks_wanted_ = false;
        const std::string why = cancel_sent_         ? "its job is being cancelled"
                                : job_over_          ? "its job has ended"
                                : client_ == nullptr ? "no job runs yet"
                                                     : "";
        if (!why.empty()) {
          sink_->Message("hvdrun: SIGQUIT: no stacks to ask for: " + why);
          continue;
        }
        const std::string address = client_->address(), token = client_->token();
        const std::string id = job_id_;
        lock.Unlock();
        AskForStacks(address, token, id);
        lock.Lock();
        continue;
      }
      const bool give_up = cancel_sent_ && Clock::now() >= deadline_;
      if (give_up && client_ != nullptr && !interrupted_) {
        interrupted_ = true;
        client_->InterruptWatches();
      }
      if (cancel_sent_ && !interrupted_) {
        cv_.WaitUntil(lock, deadline_);
      } else {
        cv_.Wait(lock);
      }
    }
  }

  // The launcher's note ("asked ranks 0, 1 for their stacks") comes back in the job's events.
  void AskForStacks(const std::string& address, const std::string& token, const std::string& id) {
    Client asker(address, token, kKillCallTimeout);
    std::vector<int> asked;
    Status s = asker.DumpStacks(id, {}, "hvdrun received SIGQUIT", &asked);
    if (!s.ok()) {
      sink_->Message("hvdrun: SIGQUIT: asking job " + id +
                     "'s ranks for their stacks failed: " + s.message());
    } else if (asked.empty()) {
      sink_->Message("hvdrun: SIGQUIT: none of job " + id + "'s ranks runs now");
    }
  }

  static constexpr std::chrono::milliseconds kZero{0};
  OutputSink* sink_;
  const std::chrono::milliseconds bound_;
  const bool local_;
  base::Mutex mu_;
  base::CondVar cv_;
  bool done_ HVD_GUARDED_BY(mu_) = false;
  int signo_ HVD_GUARDED_BY(mu_) = 0;
  int count_ HVD_GUARDED_BY(mu_) = 0;
  Client* client_ HVD_GUARDED_BY(mu_) = nullptr;
  std::string job_id_ HVD_GUARDED_BY(mu_);
  bool cancel_sent_ HVD_GUARDED_BY(mu_) = false;
  bool kill_sent_ HVD_GUARDED_BY(mu_) = false;
  bool interrupted_ HVD_GUARDED_BY(mu_) = false;
  bool stacks_wanted_ HVD_GUARDED_BY(mu_) = false;
  bool job_over_ HVD_GUARDED_BY(mu_) = false;
  Clock::time_point deadline_ HVD_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts once every member above is initialized
};

// --stdin RANK|none into the spec (mpirun's --stdin).
Status SetStdinRank(const std::string& text, control::JobSpec* spec) {
  if (text == "none") return Status::OK();
  char* end = nullptr;
  const long rank = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || rank < 0 || rank >= spec->np) {
    return InvalidArgument("--stdin " + text +
                           ": give the rank that reads hvdrun's standard "
                           "input (0 to " +
                           std::to_string(spec->np - 1) + "), or none");
  }
  spec->stdin_rank = static_cast<int>(rank);
  return Status::OK();
}

struct RunFlags {
  JobFlags job;
  ClusterFlags cluster;
  SshFlags ssh;
  std::string output_dir;
  bool verbose = false;
  std::string stdin_rank = "0";  // --stdin (stdin_forward.h)
  bool help = false;
  RunCompatFlags compat;  // horovodrun's -cb, --version, --prefix-output-with-timestamp

  void Register(control::FlagSet* flags) {
    job.Register(flags);
    flags->String("--output-filename", &output_dir,
                  "also write each rank's output to DIR/rank.N/stdout and DIR/rank.N/stderr "
                  "(N zero-padded: rank.00 ... rank.15 for 16 ranks; created up front)");
    flags->Bool("--verbose,-v", &verbose, "show progress (agents ready, ranks started...)");
    flags->String("--stdin", &stdin_rank,
                  "the rank that reads hvdrun's standard input (default 0, as mpirun), or none: "
                  "every rank reads /dev/null");
    cluster.Register(flags);
    ssh.Register(flags);
    compat.Register(flags);
    flags->Bool("--help,-h", &help, "show this help");
  }
};

}  // namespace

int RunCommand(int argc, char** argv, int first) {
  control::FlagSet flags("hvdrun");
  RunFlags f;
  f.Register(&flags);
  std::vector<std::string> program;
  Status s = flags.Parse(argc, argv, first, /*stop_at_positional=*/true, &program);
  if (!s.ok()) return ReportError(s, kExitUsage);
  if (f.help) {
    std::fputs(MainUsage(flags).c_str(), stdout);
    return kExitOk;
  }
  if (f.compat.version || f.compat.check_build) {  // horovodrun's: anywhere on the line
    std::fputs((f.compat.version ? VersionText() : CheckBuildText()).c_str(), stdout);
    return kExitOk;
  }
  const bool local = !f.cluster.HasLauncher() && !f.ssh.enabled;
  const HostEnvironment host = HostEnvironment::Current();
  control::JobSpec spec;
  s = BuildJobSpec(f.job, program, host, local ? ProgramCheck::kAlways : ProgramCheck::kWhenLocal,
                   &spec);
  if (s.ok()) s = f.ssh.Validate(flags, f.cluster.HasLauncher(), spec, f.cluster.tls);
  if (s.ok()) s = SetStdinRank(f.stdin_rank, &spec);
  if (!s.ok() && program.empty() && flags.GivenAs("--verbose") == "-v") {
    s = InvalidArgument(s.message() + kVerboseNotVersion);
  }
  if (!s.ok()) return ReportError(s, kExitUsage);
  // Cluster ranks start under remote agents: give them this environment, as local ranks inherit.
  std::vector<std::string> held_back;
  if (!local) held_back = ForwardEnvironmentToJob(&spec);
  std::string localhost_note;
  if (!local && !f.ssh.enabled) localhost_note = LocalhostToHostName(&spec);
  EmbeddedOptions eo;
  eo.kill_grace = kLocalKillGrace;
  if (local) {
    // Before any thread starts (it sets and restores the environment). hvdrun reports stalls and
    // failures itself: the embedded daemons' own lines would repeat them.
    const auto level = spec.env.find("HVD_LOG_LEVEL");
    SetEmbeddedLogLevel(level != spec.env.end() ? level->second : "", f.verbose);
    const std::string& script = f.job.elastic.discovery_script;
    const std::string hosts_from = !script.empty()
                                       ? "--host-discovery-script " + script + "'s output"
                                   : !f.job.hostfile.empty() ? "--hostfile " + f.job.hostfile
                                                             : "-H";
    s = EmbeddedAgentFor(spec, host.local_names, hosts_from, &eo.agent_host, &eo.slots);
    if (!s.ok()) return ReportError(s, kExitUsage);
  }
  std::unique_ptr<OutputSink> sink;
  s = OutputSink::Create(f.output_dir, spec.np, stdout, stderr, &sink);
  if (!s.ok()) return ReportError(s, kExitUsage);
  sink->SetTimestamps(f.compat.prefix_timestamp);
  for (const std::string& note : JobNotes(f.job)) sink->Message("hvdrun: " + note);
  // Likely a typo (-np 100000 on a laptop): said before the processes start, not refused (a
  // test may oversubscribe on purpose).
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (local && spec.hosts.empty() && cpus > 0 && spec.np > 16 * cpus) {
    sink->Message("hvdrun: -np " + std::to_string(spec.np) + " starts " + std::to_string(spec.np) +
                  " processes on this host, which has " + std::to_string(cpus) + " CPUs");
  }
  if (f.verbose && !local) {
    std::string names, secrets;
    for (const std::string& n : held_back) {
      std::string& list = LooksSecret(n) ? secrets : names;
      list += (list.empty() ? "" : " ") + n;
    }
    sink->Message("hvdrun: the ranks get this environment but for: " + names +
                  " (pass any of them with -x NAME)");
    if (!secrets.empty()) {
      sink->Message("hvdrun: held back as they look like secrets: " + secrets +
                    " (the job's environment is kept in the launcher's jobs.db and sent to every "
                    "agent; pass one with -x NAME)");
    }
  }
  std::unique_ptr<Client> client;
  if (!local && !f.ssh.enabled) {
    s = f.cluster.Connect(&client);
    if (!s.ok()) return ReportError(s);
  }

  // Destroyed in reverse: the watcher (which calls the canceller) goes before the canceller.
  CancelOnSignal canceller(sink.get(), kLocalKillGrace + kCancelSlack, local);
  std::unique_ptr<SignalWatcher> signals;
  s = SignalWatcher::Start([&](int signo, int n) { canceller.OnSignal(signo, n); }, &signals,
                           [&] { canceller.OnQuit(); });
  if (!s.ok()) return ReportError(s);

  std::unique_ptr<EmbeddedCluster> cluster;
  std::unique_ptr<SshCluster> ssh;  // hvdrun --ssh: agents started over SSH (ssh_cluster.h)
  if (f.ssh.enabled) {
    auto say = [&](const std::string& m) {
      if (f.verbose) sink->Message("hvdrun: " + m);
    };
    s = SshCluster::Start(f.ssh, spec, say, &ssh);
    if (!s.ok()) return ReportError(s, kExitError);
    client = std::make_unique<Client>(ssh->address(), ssh->token(), std::chrono::seconds(10),
                                      ssh->tls());
  } else if (local) {
    s = EmbeddedCluster::Start(eo, &cluster);
    if (!s.ok()) return ReportError(s);
    client = std::make_unique<Client>(cluster->address(), cluster->token());
    if (f.verbose) {
      sink->Message("hvdrun: embedded launcher at " + cluster->address() + ", rendezvous at " +
                    cluster->rendezvous_address() + "; agent on " +
                    (eo.agent_host.empty() ? "this host" : eo.agent_host) + " with " +
                    std::to_string(eo.slots) + " slot(s)");
      if (!cluster->token_file().empty()) {
        sink->Message("hvdrun: from another shell, while this runs: hvdrun --launcher " +
                      cluster->address() + " --token-file " + cluster->token_file() +
                      " status|logs|cancel JOB");
      }
    }
  } else if (f.verbose) {
    sink->Message("hvdrun: launcher at " + client->address());
    if (!localhost_note.empty()) sink->Message(localhost_note);
  }
  if (int sig = canceller.signo(); sig != 0) {
    sink->Message("hvdrun: " + control::SignalName(sig) + " before the job was submitted");
    return ExitCodeForSignal(sig);
  }

  std::string job_id;
  s = client->Submit(spec, &job_id);
  if (!s.ok()) return ReportError(s, kExitError);
  if (f.verbose) sink->Message("hvdrun: job " + job_id + " submitted");
  canceller.SetJob(client.get(), job_id);
  std::unique_ptr<StdinForwarder> input;
  if (spec.stdin_rank >= 0) {
    input = StdinForwarder::Start(
        client->address(), client->token(), job_id, STDIN_FILENO,
        [&](const std::string& m) { sink->Message("hvdrun: " + m); }, client->tls());
  }

  // --host-discovery-script: asked again every second while the job runs (host_discovery.h).
  std::unique_ptr<HostDiscovery> discovery;
  if (!f.job.elastic.discovery_script.empty()) {
    HostDiscovery::Options o;
    o.command = f.job.elastic.discovery_script;
    std::vector<control::HostSlots> initial;
    for (const control::HostRequest& h : spec.hosts) initial.push_back({h.host, h.slots});
    if (flags.Given("--slots-per-host")) {
      o.default_slots = static_cast<int>(f.job.horovod.slots_per_host);
    }
    const bool rename_local = !local && !f.ssh.enabled;  // as the first answer was
    discovery = std::make_unique<HostDiscovery>(
        o, initial,
        [&client, job_id, rename_local](const std::vector<control::HostSlots>& hosts) {
          if (!rename_local) return client->UpdateJobHosts(job_id, hosts);
          // "localhost" is this host's agent, by the name it registered under: otherwise the
          // launcher would find the workers here beyond the list and stop them.
          control::JobSpec named;
          for (const control::HostSlots& h : hosts) named.hosts.push_back({h.host, h.slots});
          LocalhostToHostName(&named);
          std::vector<control::HostSlots> renamed;
          for (const control::HostRequest& h : named.hosts) renamed.push_back({h.host, h.slots});
          return client->UpdateJobHosts(job_id, renamed);
        },
        [&sink](const std::string& m) { sink->Message("hvdrun: " + m); });
  }

  FollowOptions fo;
  fo.verbose = f.verbose;
  fo.attach = true;
  fo.ranks_gone_wait = kLocalKillGrace + kCancelSlack;
  FollowResult result;
  s = FollowJob(client.get(), job_id, sink.get(), fo, &result);
  canceller.Done();
  if (discovery) discovery->Stop();
  if (input) input->Stop();  // the job is over: no more reading (a rank that never read included)

  int code = kExitError;
  if (int sig = canceller.signo(); sig != 0) {
    code = ExitCodeForSignal(sig);
    if (result.ended && result.ranks_gone) {
      sink->Message("hvdrun: job " + job_id + " " + JobStateText(result.status.state));
    } else if (canceller.killed()) {
      // The second signal's message said it all; a cluster's ranks may still be being killed.
      if (!local) sink->Message("hvdrun: check job " + job_id + " with: hvdrun status " + job_id);
    } else if (local) {
      sink->Message("hvdrun: job " + job_id + " did not end in time; stopping its ranks now");
    } else {
      sink->Message("hvdrun: job " + job_id +
                    " was asked to cancel but has not ended yet; check with: hvdrun status " +
                    job_id);
    }
  } else if (!s.ok()) {
    ReportError(s, kExitError);
  } else {
    code = JobExitCode(result.status);
    const std::string summary = FailureSummary(result.status);
    if (!summary.empty()) {
      std::fflush(stdout);
      std::fputs(summary.c_str(), stderr);
    }
  }
  if (cluster) cluster->Stop();  // ends any rank still alive and reaps it before hvdrun exits
  if (ssh) ssh->Stop();          // stops the agents it started
  return code;
}

}  // namespace hvd::cli
