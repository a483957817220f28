#include "launcherd/network_check.h"

#include <algorithm>

#include "base/clock.h"
#include "base/logging.h"
#include "control/token.h"

namespace hvd::launcherd {
namespace {

// A decided probe that no placement asked for again (the job was cancelled meanwhile) is
// forgotten after this long.
constexpr auto kKeepFinished = std::chrono::seconds(60);
constexpr auto kTick = std::chrono::milliseconds(50);

}  // namespace

struct NetworkCheck::Probe {
  std::string id, job_id, selectors;
  std::vector<std::string> agent_ids;  // ring order: by the job's first rank on each
  std::vector<control::ProbeHost> hosts;
  control::Candidates candidates;
  std::vector<int> ports;           // per host; 0 until its LISTEN report
  std::vector<bool> reported;       // per host: its DIAL report arrived
  control::ProbeOutcomes outcomes;  // [candidate][host]: host's dial to its successor
  ProbeStep step = ProbeStep::kListen;
  Clock::time_point started, deadline, finished_at;
  bool finished = false;
  control::NetworkReport report;
};

NetworkCheck::NetworkCheck(NetworkCheckOptions options, AgentRegistry* agents)
    : options_(options), agents_(agents), timer_([this] { TimerLoop(); }) {}

NetworkCheck::~NetworkCheck() {
  Stop();
}

void NetworkCheck::SetOnDone(std::function<void()> on_done) {
  base::MutexLock lock(&mu_);
  on_done_ = std::move(on_done);
}

void NetworkCheck::Stop() {
  {
    base::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.NotifyAll();
  timer_.join();
}

NetworkCheck::Verdict NetworkCheck::Check(const std::string& job_id, const std::string& selectors,
                                          const std::vector<control::RankSlot>& ranks,
                                          control::NetworkReport* report, std::string* message) {
  *report = control::NetworkReport();
  std::vector<std::string> ids;
  for (const control::RankSlot& r : ranks) {
    if (std::find(ids.begin(), ids.end(), r.agent_id) == ids.end()) ids.push_back(r.agent_id);
  }
  std::vector<control::InterfaceSelector> sel;
  Status s = control::ParseInterfaceSelectors(selectors, &sel);
  if (!s.ok()) {
    *message = "--network-interface: " + s.message();
    return Verdict::kFail;
  }
  if (ids.size() <= 1 && sel.empty()) return Verdict::kReady;  // one host: nothing to decide
  std::vector<control::ProbeHost> hosts;
  const std::vector<AgentInfo> known = agents_->List();
  for (const std::string& id : ids) {
    auto it =
        std::find_if(known.begin(), known.end(), [&](const AgentInfo& a) { return a.id == id; });
    if (it == known.end()) {
      *message = "waiting for agent " + id + " to check the network";
      return Verdict::kWait;
    }
    hosts.push_back({id, it->host, it->advertise_addr, it->interfaces});
  }
  control::Candidates candidates;
  s = control::BuildCandidates(hosts, sel, &candidates);
  if (!s.ok()) {
    *message = s.message();
    return Verdict::kFail;
  }
  if (!candidates.probe) {
    if (sel.empty()) return Verdict::kReady;  // one machine over loopback: today's defaults
    *report = control::Choose(hosts, candidates, {});
    return Verdict::kReady;
  }

  base::MutexLock lock(&mu_);
  std::shared_ptr<Probe> p;
  auto it = probes_.find(job_id);
  if (it != probes_.end() && it->second->agent_ids == ids && it->second->selectors == selectors) {
    p = it->second;
  } else {
    if (it != probes_.end() && !it->second->finished)
      FinishLocked(*it->second, "placement changed");
    p = Begin(job_id, std::move(hosts), std::move(candidates), selectors);
    probes_[job_id] = p;
  }
  if (!p->finished) {
    *message = "checking the network between " + std::to_string(ids.size()) + " hosts (" +
               std::to_string(p->candidates.list.size()) + " candidate network" +
               (p->candidates.list.size() == 1 ? "" : "s") + ")";
    return Verdict::kWait;
  }
  probes_.erase(job_id);
  *report = p->report;
  if (report->ok) return Verdict::kReady;
  *message = report->summary;
  return Verdict::kFail;
}

std::shared_ptr<NetworkCheck::Probe> NetworkCheck::Begin(const std::string& job_id,
                                                         std::vector<control::ProbeHost> hosts,
                                                         control::Candidates candidates,
                                                         const std::string& selectors) {
  auto p = std::make_shared<Probe>();
  p->id = job_id + "-" + control::RandomHex(4);
  p->job_id = job_id;
  p->selectors = selectors;
  for (const control::ProbeHost& h : hosts) p->agent_ids.push_back(h.agent_id);
  p->hosts = std::move(hosts);
  p->candidates = std::move(candidates);
  const size_t n = p->hosts.size();
  p->ports.assign(n, 0);
  p->reported.assign(n, false);
  p->outcomes.assign(p->candidates.list.size(), std::vector<control::DialOutcome>(n));
  p->started = Clock::now();
  p->deadline = p->started + options_.answer_timeout;
  // The listeners must outlive both answers and the dials; DONE closes them earlier.
  const auto lifetime = 2 * options_.answer_timeout + options_.dial_timeout;
  HVD_LOG(INFO) << "job " << job_id << ": network probe " << p->id << " between " << n << " hosts, "
                << p->candidates.list.size() << " candidate(s)";
  for (const std::string& id : p->agent_ids) {
    ProbeCommand listen;
    listen.probe_id = p->id;
    listen.step = ProbeStep::kListen;
    listen.timeout_ms = lifetime.count();
    std::shared_ptr<AgentLink> link = agents_->Link(id);
    if (!link || !link->SendProbe(listen)) {
      FinishLocked(*p, "the agent " + id + " disconnected before the network probe");
      break;
    }
  }
  return p;
}

void NetworkCheck::OnReport(const std::string& agent_id, const ProbeReport& r) {
  bool done = false;
  std::function<void()> on_done;
  {
    base::MutexLock lock(&mu_);
    if (stop_) return;
    std::shared_ptr<Probe> p;
    for (const auto& [job, probe] : probes_) {
      if (probe->id == r.probe_id) p = probe;
    }
    if (!p || p->finished) return;  // an abandoned or decided probe: a late answer
    const auto pos = std::find(p->agent_ids.begin(), p->agent_ids.end(), agent_id);
    if (pos == p->agent_ids.end() || r.step != p->step) return;
    const size_t i = pos - p->agent_ids.begin();
    if (r.step == ProbeStep::kListen) {
      if (!r.error.empty() || r.port <= 0) {
        FinishLocked(*p, p->hosts[i].host + "'s agent could not open a probe listener: " +
                             (r.error.empty() ? "no port" : r.error));
      } else {
        p->ports[i] = r.port;
        if (std::find(p->ports.begin(), p->ports.end(), 0) == p->ports.end()) SendDialsLocked(*p);
      }
    } else if (r.step == ProbeStep::kDial && !p->reported[i]) {
      p->reported[i] = true;
      for (const ProbeReport::Dial& d : r.dials) {
        if (d.candidate >= 0 && d.candidate < static_cast<int>(p->outcomes.size())) {
          p->outcomes[d.candidate][i] = {d.ok, d.error, d.micros};
        }
      }
      if (std::find(p->reported.begin(), p->reported.end(), false) == p->reported.end()) {
        FinishLocked(*p, "");
      }
    }
    done = p->finished;
    on_done = on_done_;
  }
  if (done && on_done) on_done();
}

void NetworkCheck::SendDialsLocked(Probe& p) {
  p.step = ProbeStep::kDial;
  p.deadline = Clock::now() + options_.dial_timeout + options_.answer_timeout;
  const size_t n = p.hosts.size();
  for (size_t i = 0; i < n; ++i) {
    const size_t next = (i + 1) % n;  // the ring successor (control::RingPairs)
    ProbeCommand dial;
    dial.probe_id = p.id;
    dial.step = ProbeStep::kDial;
    dial.timeout_ms = options_.dial_timeout.count();
    for (size_t c = 0; c < p.candidates.list.size(); ++c) {
      dial.targets.push_back({static_cast<int>(c), p.candidates.list[c].addrs[next], p.ports[next],
                              p.agent_ids[next]});
    }
    std::shared_ptr<AgentLink> link = agents_->Link(p.agent_ids[i]);
    if (!link || !link->SendProbe(dial)) {
      FinishLocked(p, p.hosts[i].host + "'s agent disconnected during the network probe");
      return;
    }
  }
}

void NetworkCheck::FinishLocked(Probe& p, const std::string& failure) {
  if (p.finished) return;
  p.finished = true;
  p.finished_at = Clock::now();
  if (failure.empty()) {
    p.report = control::Choose(p.hosts, p.candidates, p.outcomes);
  } else {
    p.report.decided = true;
    p.report.summary = failure;
  }
  p.report.probe_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(p.finished_at - p.started).count();
  HVD_LOG(INFO) << "job " << p.job_id << ": network probe " << p.id << ": " << p.report.summary;
  for (const std::string& id : p.agent_ids) {
    ProbeCommand done;
    done.probe_id = p.id;
    done.step = ProbeStep::kDone;
    if (std::shared_ptr<AgentLink> link = agents_->Link(id)) link->SendProbe(done);
  }
}

void NetworkCheck::TimerLoop() {
  base::MutexLock lock(&mu_);
  while (!stop_) {
    cv_.WaitFor(lock, kTick, [&]() HVD_REQUIRES(mu_) { return stop_; });
    if (stop_) break;
    const auto now = Clock::now();
    bool ended = false;
    for (auto it = probes_.begin(); it != probes_.end();) {
      Probe& p = *it->second;
      if (p.finished && now - p.finished_at > kKeepFinished) {
        it = probes_.erase(it);
        continue;
      }
      if (!p.finished && now > p.deadline) {
        const bool listening = p.step == ProbeStep::kListen;
        const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
            listening ? options_.answer_timeout : options_.dial_timeout + options_.answer_timeout);
        std::string silent;
        for (size_t i = 0; i < p.hosts.size(); ++i) {
          if (listening ? p.ports[i] == 0 : !p.reported[i]) {
            silent += (silent.empty() ? "" : ", ") + p.hosts[i].host;
            for (auto& per_candidate : p.outcomes) {
              per_candidate[i].error = p.hosts[i].host +
                                       "'s agent did not report its dials within " +
                                       base::SecondsText(waited);
            }
          }
        }
        FinishLocked(
            p, listening ? "the agent on " + silent + " did not answer the network probe within " +
                               base::SecondsText(waited) + " (stuck, or older than the launcher?)"
                         : "");
        ended = true;
      }
      ++it;
    }
    if (ended && on_done_) {
      std::function<void()> on_done = on_done_;
      lock.Unlock();
      on_done();
      lock.Lock();
    }
  }
}

}  // namespace hvd::launcherd
