// The network check between a placed job's hosts, before its ranks start (docs/networking.md).
//
// For each job whose ranks span several hosts, the launcher asks their agents to probe: every
// agent opens a short-lived listener (LISTEN) and reports its port; then every host dials its
// ring successor's address on every candidate network at once, each dial bounded by the probe
// timeout (DIAL); the results decide the network (control/iface_choice.h) and the listeners close
// (DONE). JobManager asks Check() each time it places the job: the first call starts the probe and
// the job waits (PENDING, "checking the network ..."); when the last report arrives the check
// calls back, the scheduler's next pass finds the placement it kept (launcherd/job_scheduler.h), and
// Check() answers with the decision for that placement.
// A placement on other agents starts a new probe. Every step has a deadline: an agent that does
// not answer fails the check naming its host.
//
// Thread-safe. Check() runs under JobManager's lock and never blocks (commands are queued on the
// agents' links); reports and deadlines are handled on the caller's / an own timer thread, which
// call the done callback without holding any lock.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "control/iface_choice.h"
#include "control/placement.h"
#include "launcherd/agent_registry.h"
#include "launcherd/probe_types.h"

namespace hvd::launcherd {

struct NetworkCheckOptions {
  // Each dial of the probe (--probe-timeout-ms): long enough for a SYN round trip across a data
  // center, short enough that a network that drops packets delays the job by this only.
  std::chrono::milliseconds dial_timeout{500};
  // How long an agent may take to answer a step beyond the step's own work.
  std::chrono::milliseconds answer_timeout{3000};
};

class NetworkCheck {
 public:
  enum class Verdict { kReady, kWait, kFail };

  // `agents` must outlive the check.
  NetworkCheck(NetworkCheckOptions options, AgentRegistry* agents);
  ~NetworkCheck();
  NetworkCheck(const NetworkCheck&) = delete;
  NetworkCheck& operator=(const NetworkCheck&) = delete;

  // Called, without locks held, whenever a probe has ended (so the scheduler takes up the placement
  // it kept).
  void SetOnDone(std::function<void()> on_done);

  // The job `job_id`, placed as `ranks`, with --network-interface `selectors`:
  //   kReady: *report holds the decision (report->decided false: nothing to decide, one host);
  //   kWait: a probe runs; *message says so ("checking the network between 3 hosts");
  //   kFail: *message says why no network works, naming hosts and addresses (*report too).
  Verdict Check(const std::string& job_id, const std::string& selectors,
                const std::vector<control::RankSlot>& ranks, control::NetworkReport* report,
                std::string* message);

  // An agent's report (from its stream).
  void OnReport(const std::string& agent_id, const ProbeReport& report);

  // Ends the timer thread; later reports are ignored. Idempotent.
  void Stop();

 private:
  using Clock = std::chrono::steady_clock;
  struct Probe;

  std::shared_ptr<Probe> Begin(const std::string& job_id, std::vector<control::ProbeHost> hosts,
                               control::Candidates candidates, const std::string& selectors)
      HVD_REQUIRES(mu_);
  void SendDialsLocked(Probe& p) HVD_REQUIRES(mu_);
  void FinishLocked(Probe& p, const std::string& failure) HVD_REQUIRES(mu_);
  void Send(const std::string& agent_id, const ProbeCommand& command);
  void TimerLoop();

  const NetworkCheckOptions options_;
  AgentRegistry* const agents_;
  std::function<void()> on_done_;  // set before use, then read only

  base::Mutex mu_;
  base::CondVar cv_;
  std::map<std::string, std::shared_ptr<Probe>> probes_ HVD_GUARDED_BY(mu_);  // by job id
  bool stop_ HVD_GUARDED_BY(mu_) = false;
  bool done_pending_ HVD_GUARDED_BY(mu_) = false;  // a probe ended: call on_done_
  std::thread timer_;
};

}  // namespace hvd::launcherd
