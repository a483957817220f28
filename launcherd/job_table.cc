#include "launcherd/job_table.h"

#include "base/rendezvous_keys.h"
#include "base/logging.h"
#include "control/token.h"

namespace hvd::launcherd {
namespace {

constexpr auto kPersistErrorLogEvery = std::chrono::seconds(10);

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

void JobTable::Persist(const Job& job) {
  if (store_ == nullptr) return;
  StoredJob stored;
  stored.status = job.status;
  stored.secret = job.finished ? "" : job.secret;
  stored.next_seq = job.log.next_seq();
  Status s = store_->Put(stored);
  const auto now = std::chrono::steady_clock::now();
  if (!s.ok() && now - persist_error_logged_ > kPersistErrorLogEvery) {
    persist_error_logged_ = now;
    HVD_LOG(ERROR) << s.message()
                   << "; a restarted launcher would not know the latest state of job " << job.id();
  }
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
