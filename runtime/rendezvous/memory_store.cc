// The in-process Store: a map under a mutex, with a condition variable so Wait() wakes as soon as
// the last key it needs is set instead of polling.
#include <map>

#include "base/kv_counter.h"
#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "rendezvous/store.h"
#include "rendezvous/store_util.h"

namespace hvd::runtime::rendezvous {
namespace {

class MemoryStore final : public Store {
 public:
  Status Set(std::string_view key, std::string_view value) override {
    {
      base::MutexLock lock(&mu_);
      map_[std::string(key)] = std::string(value);
    }
    cv_.NotifyAll();
    return Status::OK();
  }

  Status Get(std::string_view key, std::string* value) override {
    base::MutexLock lock(&mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return NotFound(Describe() + ": key '" + std::string(key) + "' not set");
    *value = it->second;
    return Status::OK();
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    base::MutexLock lock(&mu_);
    auto all_set = [&]() HVD_REQUIRES(mu_) {
      for (const auto& k : keys) {
        if (map_.find(k) == map_.end()) return false;
      }
      return true;
    };
    if (cv_.WaitFor(lock, timeout, all_set)) return Status::OK();
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (map_.find(k) == map_.end()) missing.push_back(k);
    }
    return internal::WaitTimedOut(Describe(), timeout.count(), missing);
  }

  Status Add(std::string_view key, int64_t delta, int64_t* new_value) override {
    int64_t sum = 0;
    {
      base::MutexLock lock(&mu_);
      int64_t value = 0;
      auto it = map_.find(key);
      if (it != map_.end()) {
        HVD_RETURN_IF_ERROR(base::ParseCounter(Describe(), key, it->second, &value));
      }
      HVD_RETURN_IF_ERROR(base::AddCounter(Describe(), key, value, delta, &sum));
      map_[std::string(key)] = std::to_string(sum);
    }
    cv_.NotifyAll();
    if (new_value != nullptr) *new_value = sum;
    return Status::OK();
  }

  std::string Describe() const override { return "memory store"; }

 private:
  base::Mutex mu_;
  base::CondVar cv_;
  std::map<std::string, std::string, std::less<>> map_ HVD_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<Store> NewMemoryStore() {
  return std::make_unique<MemoryStore>();
}

}  // namespace hvd::runtime::rendezvous
