#include "launcherd/agent_inbox.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "launcherd/job_manager.h"
#include "launcherd/network_check.h"

namespace hvd::launcherd {

class AgentInbox::Stream {
 public:
  Stream(std::string agent_id, std::shared_ptr<AgentLink> link, uint64_t incarnation)
      : agent_id(std::move(agent_id)), link(std::move(link)), incarnation(incarnation) {}

  const std::string agent_id;
  const std::shared_ptr<AgentLink> link;  // held: compared with the registry's current link
  const uint64_t incarnation;             // AgentInfo.incarnation

  base::Mutex mu;
  base::CondVar space;  // the applier took the queue
  std::deque<InboxEntry> queue HVD_GUARDED_BY(mu);
  // When the oldest entry of `queue` arrived (the queue is FIFO and taken whole, so that is when
  // it last became non-empty), and of the batch being applied: Backlog().
  std::chrono::steady_clock::time_point queued_since HVD_GUARDED_BY(mu);
  bool applying HVD_GUARDED_BY(mu) = false;
  std::chrono::steady_clock::time_point applying_since HVD_GUARDED_BY(mu);
  // In the inbox's ready_ or being applied: then the applier comes back for what is queued.
  bool scheduled HVD_GUARDED_BY(mu) = false;
  std::function<void()> on_room HVD_GUARDED_BY(mu);  // WhenRoom's, until the queue is taken
};

namespace {

bool IsHeartbeat(const InboxEntry& e) {
  const auto* report = std::get_if<AgentReport>(&e);
  return report != nullptr && std::holds_alternative<HeartbeatReport>(*report);
}

}  // namespace

AgentInbox::AgentInbox(const AgentRegistry* agents, JobManager* jobs)
    : agents_(agents), jobs_(jobs), applier_([this] { ApplierLoop(); }) {
  jobs_->SetAgentBacklog(
      [this](const std::string& agent_id, std::chrono::steady_clock::time_point before) {
        return Backlog(agent_id, before);
      });
}

AgentInbox::~AgentInbox() {
  jobs_->SetAgentBacklog(nullptr);  // before this inbox goes
  {
    base::MutexLock lock(&mu_);
    stop_ = true;
    work_cv_.NotifyAll();
  }
  applier_.join();
}

std::shared_ptr<AgentInbox::Stream> AgentInbox::Open(const std::string& agent_id,
                                                     std::shared_ptr<AgentLink> link,
                                                     uint64_t incarnation) {
  auto stream = std::make_shared<Stream>(agent_id, std::move(link), incarnation);
  base::MutexLock lock(&mu_);
  if (current_.size() >= prune_at_) {  // forget agents' ended streams, amortized O(1) per Open
    for (auto it = current_.begin(); it != current_.end();) {
      it = it->second.expired() ? current_.erase(it) : std::next(it);
    }
    prune_at_ = 2 * current_.size() + 64;
  }
  current_[agent_id] = stream;
  return stream;
}

bool AgentInbox::Backlog(const std::string& agent_id,
                         std::chrono::steady_clock::time_point before) {
  std::shared_ptr<Stream> stream;
  {
    base::MutexLock lock(&mu_);
    auto it = current_.find(agent_id);
    if (it != current_.end()) stream = it->second.lock();
  }
  if (!stream) return false;
  base::MutexLock lock(&stream->mu);
  return (stream->applying && stream->applying_since <= before) ||
         (!stream->queue.empty() && stream->queued_since <= before);
}

bool AgentInbox::Post(const std::shared_ptr<Stream>& stream, InboxEntry& entry,
                      std::chrono::steady_clock::time_point deadline) {
  bool added = true;
  bool schedule = false;
  {
    Stream& s = *stream;
    base::MutexLock lock(&s.mu);
    if (IsHeartbeat(entry) && !s.queue.empty() && IsHeartbeat(s.queue.back())) {
      s.queue.back() = std::move(entry);  // the newer heartbeat says all the older one did
      added = false;
    } else {
      if (!s.space.WaitUntil(lock, deadline,
                             [&]() HVD_REQUIRES(s.mu) { return s.queue.size() < kMaxQueued; })) {
        return false;
      }
      if (s.queue.empty()) s.queued_since = std::chrono::steady_clock::now();
      s.queue.push_back(std::move(entry));
    }
    schedule = !s.scheduled;
    s.scheduled = true;
  }
  if (!added && !schedule) return true;
  base::MutexLock lock(&mu_);
  posted_ += added;
  if (schedule) {
    ready_.push_back(stream);
    work_cv_.NotifyOne();
  }
  return true;
}

bool AgentInbox::WhenRoom(const std::shared_ptr<Stream>& stream, std::function<void()> resume) {
  base::MutexLock lock(&stream->mu);
  if (stream->queue.size() < kMaxQueued) return false;
  stream->on_room = std::move(resume);  // a full queue is scheduled: the applier will take it
  return true;
}

bool AgentInbox::WaitApplied(std::chrono::milliseconds timeout) {
  base::MutexLock lock(&mu_);
  const int64_t target = posted_;
  return applied_cv_.WaitFor(lock, timeout, [&]() HVD_REQUIRES(mu_) { return applied_ >= target; });
}

void AgentInbox::ApplierLoop() {
  base::MutexLock lock(&mu_);
  while (true) {
    work_cv_.Wait(lock, [&]() HVD_REQUIRES(mu_) { return stop_ || !ready_.empty(); });
    if (ready_.empty()) return;  // stopping, and everything posted was applied
    std::shared_ptr<Stream> stream = std::move(ready_.front());
    ready_.pop_front();
    lock.Unlock();
    std::deque<InboxEntry> entries;
    std::function<void()> resume;
    {
      base::MutexLock s_lock(&stream->mu);
      entries.swap(stream->queue);
      stream->applying = !entries.empty();
      stream->applying_since = stream->queued_since;
      stream->space.NotifyAll();
      resume.swap(stream->on_room);
    }
    if (resume) resume();  // its reader posts again (into the emptied queue) and reads on
    const size_t n = entries.size();
    Apply(*stream, std::move(entries));
    bool again = false;
    {
      base::MutexLock s_lock(&stream->mu);
      again = !stream->queue.empty();
      stream->scheduled = again;
      stream->applying = false;
    }
    lock.Lock();
    applied_ += static_cast<int64_t>(n);
    applied_cv_.NotifyAll();
    if (again) ready_.push_back(std::move(stream));  // behind the streams already waiting
  }
}

void AgentInbox::Apply(Stream& stream, std::deque<InboxEntry> entries) {
  AppliedSeqs& seqs = applied_seqs_[stream.agent_id];
  // Another process under the agent's id (restarted with its --state-dir) numbers from 1 again.
  // Only its current stream decides: a superseded stream's reports are dropped anyway.
  if (seqs.incarnation != stream.incarnation &&
      agents_->Link(stream.agent_id).get() == stream.link.get()) {
    seqs = AppliedSeqs{stream.incarnation, 0};
  }
  const bool numbered = stream.incarnation != 0 && seqs.incarnation == stream.incarnation;
  bool ack = false;  // a numbered event was applied now or before (a resend after a lost ack)
  // Reports go to JobManager in runs, one lock acquisition each; the other entries keep their
  // place between the runs.
  std::vector<AgentReport> run;
  std::vector<uint64_t> run_seqs;  // per report of `run`: its seq, or 0
  uint64_t run_through = seqs.through;
  auto flush = [&] {
    if (run.empty()) return;
    const size_t applied =
        jobs_->OnAgentReports(stream.agent_id, stream.link.get(), std::move(run));
    // Seqs rise along a stream: the last applied is the highest.
    for (size_t i = 0; i < applied; ++i) seqs.through = std::max(seqs.through, run_seqs[i]);
    if (applied < run_seqs.size()) run_through = seqs.through;  // superseded: resent later
    run.clear();
    run_seqs.clear();
  };
  for (InboxEntry& entry : entries) {
    if (auto* report = std::get_if<AgentReport>(&entry)) {
      const auto* event = std::get_if<RankEventReport>(report);
      const uint64_t seq = numbered && event != nullptr ? event->seq : 0;
      if (seq != 0) {
        ack = true;
        if (seq <= run_through) continue;  // applied before: the agent did not hear our ack
        run_through = seq;
      }
      run.push_back(std::move(*report));
      run_seqs.push_back(seq);
      continue;
    }
    flush();
    if (auto* probe = std::get_if<ProbeReport>(&entry)) {
      // Not under JobManager's lock: a probe that ends calls back into placement.
      if (NetworkCheck* network = network_.load()) network->OnReport(stream.agent_id, *probe);
    } else if (std::holds_alternative<StreamRegistered>(entry)) {
      // A stream replaced before its registration was applied has nothing to reconcile: the
      // newer one queued its own.
      if (agents_->Link(stream.agent_id).get() == stream.link.get()) {
        jobs_->OnAgentRegistered(stream.agent_id);  // its next heartbeat says what still runs
        jobs_->Schedule();                          // pending jobs may fit now
      }
    } else {
      const auto& ended = std::get<StreamEnded>(entry);
      // A goodbye counts while no newer stream holds the id: the agent restarted under it (a
      // --state-dir) may have registered, and been given ranks, before this was applied.
      const bool stopped = ended.stopped && agents_->Link(stream.agent_id) == nullptr;
      // A no-op when a newer stream took over.
      jobs_->OnAgentDisconnected(stream.agent_id, stopped ? &*ended.stopped : nullptr);
    }
  }
  flush();
  if (!ack || seqs.through == 0) return;
  // One ack per batch, on the agent's newest stream (maybe newer than this one): the agent
  // forgets what it covers, and sends the rest again on its next stream. Never to another
  // process under the same id, whose seqs mean other events.
  std::shared_ptr<Stream> newest;
  {
    base::MutexLock lock(&mu_);
    auto it = current_.find(stream.agent_id);
    if (it != current_.end()) newest = it->second.lock();
  }
  if (newest && newest->incarnation == seqs.incarnation) {
    newest->link->SendRankEventAck(seqs.through);
  }
}

}  // namespace hvd::launcherd
