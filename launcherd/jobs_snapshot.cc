#include "launcherd/jobs_snapshot.h"

#include <set>

#include "launcherd/job_manager.h"

namespace hvd::launcherd {

const JobStatus* JobsSnapshot::Find(const std::string& id) const {
  auto it = index_.find(id);
  return it == index_.end() ? nullptr : jobs[it->second].get();
}

std::shared_ptr<const JobsSnapshot> JobsSnapshotBuilder::Build(
    const std::vector<std::shared_ptr<Job>>& jobs, uint64_t version) {
  auto snap = std::make_shared<JobsSnapshot>();
  snap->version = version;
  snap->jobs.reserve(jobs.size());
  snap->summaries.reserve(jobs.size());
  snap->index_.reserve(jobs.size());
  std::unordered_map<std::string, Entry> next;
  next.reserve(jobs.size());
  // As Scheduler::BusySlots: a slot held by live ranks of two jobs counts once.
  std::map<std::string, std::set<int>> busy;
  for (const std::shared_ptr<Job>& job : jobs) {
    Entry e;
    auto old = cache_.find(job->id());
    if (old != cache_.end() && old->second.job == job.get() &&
        old->second.job_version == job->version && old->second.finished == job->finished) {
      e = std::move(old->second);
    } else {  // new or changed: copy it, once, for every reader until it changes again
      e.job = job.get();
      e.job_version = job->version;
      e.finished = job->finished;
      e.full = std::make_shared<const JobStatus>(job->status);
      JobStatus summary = job->status;
      summary.ranks.clear();
      e.summary = std::make_shared<const JobStatus>(std::move(summary));
      for (const RankStatus& r : job->status.ranks) {
        e.ranks_running += r.state == RankState::kRunning;
        if (!job->finished && RankLive(r.state)) {
          e.live_slots[r.placement.agent_id].push_back(r.placement.slot);
        }
      }
    }
    ++snap->counts.jobs[e.full->state];
    snap->counts.ranks_running += e.ranks_running;
    for (const auto& [agent, slots] : e.live_slots) busy[agent].insert(slots.begin(), slots.end());
    snap->index_.emplace(job->id(), snap->jobs.size());
    snap->jobs.push_back(e.full);
    snap->summaries.push_back(e.summary);
    next.emplace(job->id(), std::move(e));
  }
  for (const auto& [agent, slots] : busy) {
    snap->counts.slots_in_use[agent] = static_cast<int>(slots.size());
  }
  cache_ = std::move(next);  // pruned jobs leave the cache with the table
  return snap;
}

SnapshotPublisher::SnapshotPublisher(std::function<void()> publish)
    : publish_(std::move(publish)), current_(std::make_shared<const JobsSnapshot>()) {
  thread_ = std::thread([this] { Loop(); });
}

SnapshotPublisher::~SnapshotPublisher() {
  {
    base::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  thread_.join();
}

void SnapshotPublisher::Changed() {
  changes_.fetch_add(1, std::memory_order_acq_rel);
  if (pending_.exchange(true, std::memory_order_acq_rel)) return;  // the thread is on its way
  base::MutexLock lock(&mu_);
  wake_ = true;
  cv_.NotifyOne();
}

uint64_t SnapshotPublisher::BeginBuild() {
  // Under the manager's lock, as Changed() is: a change after this sets pending_ again.
  pending_.store(false, std::memory_order_release);
  return changes_.load(std::memory_order_acquire);
}

void SnapshotPublisher::Swap(std::shared_ptr<const JobsSnapshot> snapshot) {
  std::shared_ptr<const JobsSnapshot> old;  // freed outside the lock
  base::MutexLock lock(&mu_);
  // Builds run under the manager's lock, so they arrive in order; keep the newest anyway.
  if (snapshot->version < current_->version) return;
  old = std::move(current_);
  current_ = std::move(snapshot);
  last_publish_ = std::chrono::steady_clock::now();
}

std::shared_ptr<const JobsSnapshot> SnapshotPublisher::Current() const {
  base::MutexLock lock(&mu_);
  return current_;
}

void SnapshotPublisher::Loop() {
  base::MutexLock lock(&mu_);
  while (true) {
    cv_.Wait(lock, [&]() HVD_REQUIRES(mu_) { return wake_ || stop_; });
    if (stop_) return;
    wake_ = false;
    // At once after a quiet moment; under a stream of changes at most every kPublishInterval.
    const auto due = last_publish_ + kPublishInterval;
    if (cv_.WaitUntil(lock, due, [&]() HVD_REQUIRES(mu_) { return stop_; })) return;
    lock.Unlock();
    publish_();
    lock.Lock();
  }
}

// JobManager's side (its lock is needed to build; never to read).
void JobManager::PublishLocked() const {
  if (!published_.Stale(*published_.Current())) return;
  const uint64_t version = published_.BeginBuild();
  published_.Swap(snapshot_builder_.Build(table_.jobs(), version));
}

void JobManager::Publish() {
  base::MutexLock lock(&mu_);
  published_.Swap(snapshot_builder_.Build(table_.jobs(), published_.BeginBuild()));
}

Status JobManager::GetPublished(const std::string& id,
                                std::shared_ptr<const JobStatus>* out) const {
  const std::shared_ptr<const JobsSnapshot> snap = Snapshot();
  if (const JobStatus* published = snap->Find(id)) {
    *out = std::shared_ptr<const JobStatus>(snap, published);  // keeps the snapshot alive
    return Status::OK();
  }
  // Not published (yet): the manager itself, which says why it does not have it.
  JobStatus status;
  HVD_RETURN_IF_ERROR(Get(id, &status));
  *out = std::make_shared<const JobStatus>(std::move(status));
  return Status::OK();
}

std::shared_ptr<const JobsSnapshot> JobManager::Snapshot() const {
  std::shared_ptr<const JobsSnapshot> snap = published_.Current();
  // Stale and the lock free (the manager idle): publish first, so an idle launcher answers with
  // every change. Busy: answer from what was published; the thread publishes soon.
  if (published_.Stale(*snap) && mu_.TryLock()) {
    PublishLocked();
    mu_.Unlock();
    snap = published_.Current();
  }
  return snap;
}

}  // namespace hvd::launcherd
