#include "agent/probe.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include "agent/probe_dial.h"
#include "base/logging.h"

namespace hvd::agent {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

// Bounds on what one launcher message can ask for: a probe's listener lives at most this long,
// a dial waits at most this long, and this many probes run at once (one per starting job).
constexpr Ms kMaxListen{60000};
constexpr Ms kMaxDial{30000};
constexpr size_t kMaxTasks = 64;

Ms Clamp(int64_t ms, Ms max) {
  return std::min(Ms(std::max<int64_t>(ms, 1)), max);
}

}  // namespace

Prober::~Prober() {
  base::MutexLock lock(&mu_);
  for (auto& t : tasks_) {
    if (t->stop_fd >= 0) {
      const uint64_t one = 1;
      (void)!write(t->stop_fd, &one, sizeof one);
    }
  }
  for (auto& t : tasks_) t->done = true;  // ReapLocked joins them all now
  ReapLocked();
}

void Prober::Handle(const hvd::v1::NetworkProbe& probe) {
  {
    base::MutexLock lock(&mu_);
    ReapLocked();
  }
  switch (probe.step()) {
    case hvd::v1::NetworkProbe::LISTEN:
      Listen(probe);
      break;
    case hvd::v1::NetworkProbe::DIAL:
      Dial(probe);
      break;
    case hvd::v1::NetworkProbe::DONE: {
      base::MutexLock lock(&mu_);
      for (auto& t : tasks_) {
        if (t->probe_id == probe.probe_id() && t->stop_fd >= 0) {
          const uint64_t one = 1;
          (void)!write(t->stop_fd, &one, sizeof one);
        }
      }
      break;
    }
    default:
      HVD_LOG(WARNING) << "network probe " << probe.probe_id() << ": unknown step " << probe.step()
                       << " ignored (a newer launcher?)";
  }
}

void Prober::Listen(const hvd::v1::NetworkProbe& probe) {
  hvd::v1::NetworkProbeReport report;
  report.set_probe_id(probe.probe_id());
  report.set_step(hvd::v1::NetworkProbe::LISTEN);
  auto task = std::make_unique<Task>();
  task->probe_id = probe.probe_id();
  int port = 0;
  Status s = OpenProbeListener(&task->listen_fd, &port);
  if (s.ok()) {
    task->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (task->stop_fd < 0) s = Unavailable("probe listener: eventfd failed");
  }
  base::MutexLock lock(&mu_);
  if (s.ok() && tasks_.size() >= kMaxTasks) {
    s = Unavailable("this agent already runs " + std::to_string(kMaxTasks) + " network probes");
  }
  if (!s.ok()) {
    if (task->listen_fd >= 0) close(task->listen_fd);
    if (task->stop_fd >= 0) close(task->stop_fd);
    report.set_error(s.message());
    Report(report);
    return;
  }
  report.set_port(port);
  Report(report);  // queued before the thread can possibly be dialed: the launcher waits for it
  Task* t = task.get();
  const std::string greeting = ProbeGreeting(probe.probe_id(), agent_id_());
  const auto deadline = Clock::now() + Clamp(probe.timeout_ms(), kMaxListen);
  t->thread = std::thread([t, greeting, deadline] {
    ServeProbe(t->listen_fd, t->stop_fd, greeting, deadline);
    // Closed at once (the kernel would complete connections on it otherwise); stop_fd stays open
    // until ReapLocked, since DONE may still write to it.
    close(t->listen_fd);
    t->listen_fd = -1;
    t->done = true;
  });
  tasks_.push_back(std::move(task));
}

void Prober::Dial(const hvd::v1::NetworkProbe& probe) {
  std::vector<ProbeDialTarget> targets;
  std::vector<int> candidates;
  for (const hvd::v1::ProbeTarget& t : probe.targets()) {
    targets.push_back({t.address(), t.port(), t.expect_agent()});
    candidates.push_back(t.candidate());
  }
  auto task = std::make_unique<Task>();
  task->probe_id = probe.probe_id();
  Task* t = task.get();
  const Ms timeout = Clamp(probe.timeout_ms(), kMaxDial);
  const std::string id = probe.probe_id();
  base::MutexLock lock(&mu_);
  t->thread = std::thread([this, t, targets, candidates, timeout, id] {
    hvd::v1::NetworkProbeReport report;
    report.set_probe_id(id);
    report.set_step(hvd::v1::NetworkProbe::DIAL);
    const std::vector<ProbeDialResult> results = DialAll(targets, id, timeout);
    for (size_t i = 0; i < results.size(); ++i) {
      hvd::v1::ProbeDialResult* r = report.add_dials();
      r->set_candidate(candidates[i]);
      r->set_ok(results[i].ok);
      r->set_error(results[i].error);
      r->set_micros(results[i].micros);
    }
    Report(report);
    t->done = true;
  });
  tasks_.push_back(std::move(task));
}

void Prober::Report(const hvd::v1::NetworkProbeReport& report) {
  hvd::v1::AgentMessage m;
  *m.mutable_probe_report() = report;
  send_(std::move(m));
}

void Prober::ReapLocked() {
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    if (!(*it)->done) {
      ++it;
      continue;
    }
    if ((*it)->thread.joinable()) (*it)->thread.join();
    if ((*it)->listen_fd >= 0) close((*it)->listen_fd);
    if ((*it)->stop_fd >= 0) close((*it)->stop_fd);
    it = tasks_.erase(it);
  }
}

}  // namespace hvd::agent
