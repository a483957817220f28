// The in-process Store: a map under a mutex, with a condition variable so Wait() wakes as soon as
// the last key it needs is set instead of polling.
#include <condition_variable>
#include <map>
#include <mutex>

#include "common/thread_annotations.h"
#include "rendezvous/store.h"
#include "rendezvous/store_util.h"

namespace hvd::runtime::rendezvous {
namespace {

class MemoryStore final : public Store {
 public:
  Status Set(std::string_view key, std::string_view value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      map_[std::string(key)] = std::string(value);
    }
    cv_.notify_all();
    return Status::OK();
  }

  Status Get(std::string_view key, std::string* value) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return NotFound(Describe() + ": key '" + std::string(key) + "' not set");
    *value = it->second;
    return Status::OK();
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto all_set = [&]() REQUIRES(mu_) {
      for (const auto& k : keys) {
        if (map_.find(k) == map_.end()) return false;
      }
      return true;
    };
    if (cv_.wait_for(lock, timeout, all_set)) return Status::OK();
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (map_.find(k) == map_.end()) missing.push_back(k);
    }
    return internal::WaitTimedOut(Describe(), timeout.count(), missing);
  }

  Status Add(std::string_view key, int64_t delta, int64_t* new_value) override {
    int64_t sum = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      int64_t value = 0;
      auto it = map_.find(key);
      if (it != map_.end()) {
        HVD_RETURN_IF_ERROR(internal::ParseCounter(Describe(), key, it->second, &value));
      }
      HVD_RETURN_IF_ERROR(internal::AddCounter(Describe(), key, value, delta, &sum));
      map_[std::string(key)] = std::to_string(sum);
    }
    cv_.notify_all();
    if (new_value != nullptr) *new_value = sum;
    return Status::OK();
  }

  std::string Describe() const override { return "memory store"; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string, std::less<>> map_ GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<Store> NewMemoryStore() {
  return std::make_unique<MemoryStore>();
}

}  // namespace hvd::runtime::rendezvous
