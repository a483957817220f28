#include "launcherd/stdin_relay.h"

namespace hvd::launcherd {

std::shared_ptr<StdinRelay::Entry> StdinRelay::At(const std::string& job) {
  std::shared_ptr<Entry>& e = jobs_[job];
  if (e == nullptr) e = std::make_shared<Entry>();
  return e;
}

Status StdinRelay::Write(const std::string& job, const std::string& data,
                         std::chrono::milliseconds wait) {
  base::MutexLock lock(&mu_);
  const std::shared_ptr<Entry> entry = At(job);
  Entry& e = *entry;
  // One chunk may overshoot the capacity: the bound is capacity plus a chunk (64 KiB from hvdrun,
  // at most gRPC's message limit from anyone).
  cv_.WaitFor(lock, wait,
              [&]() HVD_REQUIRES(mu_) { return e.dropped || e.closed || e.bytes < capacity_; });
  if (e.dropped) return FailedPrecondition("job " + job + " has ended; its input was dropped");
  if (e.closed) return FailedPrecondition("the input of job " + job + " has already ended");
  if (e.bytes >= capacity_) return DeadlineExceeded("the input buffer of job " + job + " is full");
  if (!data.empty()) {
    e.chunks.push_back(data);
    e.bytes += data.size();
  }
  cv_.NotifyAll();
  return Status::OK();
}

void StdinRelay::Close(const std::string& job) {
  base::MutexLock lock(&mu_);
  At(job)->closed = true;
  cv_.NotifyAll();
}

Status StdinRelay::Read(const std::string& job, int attempt, size_t max,
                        std::chrono::milliseconds wait, std::string* data, bool* eof) {
  data->clear();
  *eof = false;
  base::MutexLock lock(&mu_);
  const std::shared_ptr<Entry> entry = At(job);
  Entry& e = *entry;
  if (attempt < e.attempt) {
    return Aborted("attempt " + std::to_string(e.attempt) + " of job " + job +
                   " reads its input now");
  }
  if (attempt > e.attempt) {
    e.attempt = attempt;
    cv_.NotifyAll();  // an older attempt's waiting reader gives way
  }
  cv_.WaitFor(lock, wait, [&]() HVD_REQUIRES(mu_) {
    return e.dropped || e.attempt != attempt || e.bytes > 0 || e.closed;
  });
  if (e.dropped) return FailedPrecondition("job " + job + " has ended; its input was dropped");
  if (e.attempt != attempt) {
    return Aborted("attempt " + std::to_string(e.attempt) + " of job " + job +
                   " reads its input now");
  }
  if (e.bytes == 0) {
    if (e.closed) {
      *eof = true;
      return Status::OK();
    }
    return DeadlineExceeded("no input for job " + job + " yet");
  }
  while (!e.chunks.empty() && data->size() < max) {
    std::string& front = e.chunks.front();
    const size_t take = std::min(front.size(), max - data->size());
    data->append(front, 0, take);
    if (take == front.size()) {
      e.chunks.pop_front();
    } else {
      front.erase(0, take);
    }
    e.bytes -= take;
  }
  cv_.NotifyAll();  // room for the writer
  return Status::OK();
}

bool StdinRelay::Drained(const std::string& job) const {
  base::MutexLock lock(&mu_);
  auto it = jobs_.find(job);
  return it == jobs_.end() || it->second->dropped || it->second->bytes == 0;
}

void StdinRelay::Drop(const std::string& job) {
  base::MutexLock lock(&mu_);
  const std::shared_ptr<Entry> entry = At(job);
  Entry& e = *entry;
  e.dropped = true;
  e.chunks.clear();
  e.bytes = 0;
  cv_.NotifyAll();
}

void StdinRelay::Prune(const std::function<bool(const std::string& job)>& ended) {
  std::vector<std::string> ids;
  {
    base::MutexLock lock(&mu_);
    for (const auto& [id, e] : jobs_) ids.push_back(id);
  }
  // `ended` asks the job table: never called with mu_ held.
  std::vector<std::string> gone;
  for (const std::string& id : ids) {
    if (ended(id)) gone.push_back(id);
  }
  base::MutexLock lock(&mu_);
  for (const std::string& id : gone) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    // A call still waiting on the entry holds it: it wakes to find it dropped.
    it->second->dropped = true;
    it->second->chunks.clear();
    it->second->bytes = 0;
  }
  cv_.NotifyAll();
  for (const std::string& id : gone) jobs_.erase(id);
}

size_t StdinRelay::buffered(const std::string& job) const {
  base::MutexLock lock(&mu_);
  auto it = jobs_.find(job);
  return it == jobs_.end() ? 0 : it->second->bytes;
}

size_t StdinRelay::jobs() const {
  base::MutexLock lock(&mu_);
  return jobs_.size();
}

}  // namespace hvd::launcherd
