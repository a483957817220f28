#include "launcherd/job_table.h"

#include "base/rendezvous_keys.h"
#include "base/logging.h"
#include "control/token.h"

namespace hvd::launcherd {
namespace {

constexpr auto kPersistErrorLogEvery = std::chrono::seconds(10);
// After a failed write, changes wait this long (or for the sweeper's flush) before the next try:
// a failing disk must not turn every rank event back into a write of every dirty job.
constexpr auto kPersistRetryAfter = std::chrono::seconds(1);

}  // namespace

std::string JobTable::NewId() const {
  std::string id;
  do {
    id = control::RandomHex(4);
  } while (by_id_.count(id));
  return id;
}

void JobTable::Add(JobPtr job) {
  by_id_[job->id()] = job;
  jobs_.push_back(std::move(job));
}

JobPtr JobTable::Find(const std::string& id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

bool JobTable::AnyPending() const {
  for (const JobPtr& job : jobs_) {
    if (job->state() == JobState::kPending) return true;
  }
  return false;
}

void JobTable::Persist(const Job& job) {
  if (store_ == nullptr) return;
  auto it = by_id_.find(job.id());
  if (it == by_id_.end()) return;  // pruned (its row is gone too): not written back
  dirty_[job.id()] = it->second;
  auto w = written_.find(job.id());
  const bool urgent = w == written_.end() || w->second.state != job.state() ||
                      w->second.attempt != job.status.attempt ||
                      w->second.finished != job.finished || w->second.live != job.AnyRankLive();
  if (urgent && std::chrono::steady_clock::now() >= retry_after_) Flush();
}

void JobTable::Flush() {
  if (store_ == nullptr || dirty_.empty()) return;
  std::vector<StoredJob> batch;
  batch.reserve(dirty_.size());
  for (const auto& [id, job] : dirty_) {
    StoredJob stored;
    stored.status = job->status;
    stored.secret = job->finished ? "" : job->secret;
    stored.next_seq = job->log.next_seq();
    batch.push_back(std::move(stored));
  }
  Status s = store_->PutMany(batch);
  if (!s.ok()) {
    const auto now = std::chrono::steady_clock::now();
    retry_after_ = now + kPersistRetryAfter;
    if (now - persist_error_logged_ > kPersistErrorLogEvery) {
      persist_error_logged_ = now;
      HVD_LOG(ERROR) << s.message() << "; a restarted launcher would not know the latest state of "
                     << dirty_.size() << " job(s) (retrying)";
    }
    return;  // still dirty
  }
  ++flushes_;
  rows_written_ += batch.size();
  for (const auto& [id, job] : dirty_) {
    written_[id] = {job->state(), job->status.attempt, job->finished, job->AnyRankLive()};
  }
  dirty_.clear();
}

void JobTable::Prune() {
  size_t finished = 0;
  for (const JobPtr& job : jobs_) finished += job->finished;
  for (auto it = jobs_.begin(); it != jobs_.end() && finished > max_finished_;) {
    if ((*it)->finished) {
      if (store_ != nullptr) {
        Status s = store_->Remove((*it)->id());
        if (!s.ok()) {
          HVD_LOG(WARNING) << s.message();
        }
      }
      dirty_.erase((*it)->id());
      written_.erase((*it)->id());
      by_id_.erase((*it)->id());
      it = jobs_.erase(it);
      --finished;
    } else {
      ++it;
    }
  }
}

void JobSecrets::Add(const std::string& job_id, const std::string& secret) {
  base::MutexLock lock(&mu_);
  secrets_[job_id] = secret;
}

void JobSecrets::Forget(const std::string& job_id) {
  base::MutexLock lock(&mu_);
  secrets_.erase(job_id);
}

bool JobSecrets::Resolve(const std::string& secret, std::string* prefix) const {
  if (secret.empty()) return false;
  base::MutexLock lock(&mu_);
  bool found = false;
  // Compare against every live secret in constant time rather than looking it up by value.
  for (const auto& [id, s] : secrets_) {
    if (control::TokensEqual(secret, s) && !found) {
      found = true;
      *prefix = base::JobPrefix(id);
    }
  }
  return found;
}

}  // namespace hvd::launcherd
