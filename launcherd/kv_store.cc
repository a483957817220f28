// The launcher's rendezvous store: a map under one mutex and one condition variable. Waiters
// re-check their keys on every change; rendezvous traffic is a few keys per rank per job, so one
// notify_all per write costs less than per-key waiter lists would in code.
#include "launcherd/kv_store.h"

#include <algorithm>

#include "rendezvous/store_util.h"

namespace hvd::launcherd {
namespace {

constexpr const char* kName = "launcher rendezvous store";
// A wait longer than this is a caller's mistake (or garbage on the wire); clamping keeps the
// deadline arithmetic far from overflow. A week outlasts any rendezvous.
constexpr auto kMaxWait = std::chrono::hours(24 * 7);
constexpr size_t kMaxListed = 64;  // keys named in a timeout message

std::string ListKeys(const std::vector<std::string>& keys) {
  std::string m;
  for (size_t i = 0; i < keys.size() && i < kMaxListed; ++i) {
    m += (i ? ", '" : "'") + keys[i] + "'";
  }
  if (keys.size() > kMaxListed) m += " and " + std::to_string(keys.size() - kMaxListed) + " more";
  return m;
}

}  // namespace

Status KvStore::Set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
    ++stats_.sets;
  }
  cv_.notify_all();
  if (observer_) observer_(key, value);
  return Status::OK();
}

Status KvStore::Get(const std::string& key, std::string* value) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.gets;
  auto it = data_.find(key);
  if (it == data_.end()) return NotFound(std::string(kName) + ": key '" + key + "' not set");
  *value = it->second;
  return Status::OK();
}

Status KvStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto wait =
      std::clamp<std::chrono::milliseconds>(timeout, std::chrono::milliseconds(0), kMaxWait);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::unique_lock<std::mutex> lock(mu_);
  ++stats_.waits;
  auto all_set = [&]() REQUIRES(mu_) {
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string& k) { return data_.count(k) != 0; });
  };
  cv_.wait_until(lock, deadline, [&]() REQUIRES(mu_) { return shutdown_ || all_set(); });
  if (shutdown_) {
    return Status(StatusCode::kCancelled,
                  std::string(kName) + " is shut down: the launcher is stopping");
  }
  if (all_set()) return Status::OK();
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    if (data_.count(k) == 0) missing.push_back(k);
  }
  const std::string what =
      std::to_string(missing.size()) + (missing.size() == 1 ? " key" : " keys");
  return DeadlineExceeded(std::string(kName) + ": timed out after " +
                          std::to_string(timeout.count()) + " ms waiting for " + what + ": " +
                          ListKeys(missing));
}

Status KvStore::Add(const std::string& key, int64_t delta, int64_t* value) {
  int64_t sum = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.adds;
    int64_t current = 0;
    auto it = data_.find(key);
    // The runtime's stores parse counters the same way, so a job behaves alike on every store.
    if (it != data_.end()) {
      HVD_RETURN_IF_ERROR(
          runtime::rendezvous::internal::ParseCounter(kName, key, it->second, &current));
    }
    HVD_RETURN_IF_ERROR(
        runtime::rendezvous::internal::AddCounter(kName, key, current, delta, &sum));
    data_[key] = std::to_string(sum);
  }
  cv_.notify_all();
  if (value != nullptr) *value = sum;
  return Status::OK();
}

Status KvStore::CompareAndSet(const std::string& key, bool expect_absent,
                              const std::string& expected, const std::string& desired,
                              bool* swapped, std::string* current, bool* found) {
  bool did = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.cas;
    auto it = data_.find(key);
    const bool present = it != data_.end();
    if (expect_absent ? !present : (present && it->second == expected)) {
      data_[key] = desired;
      did = true;
    }
    auto now = data_.find(key);
    if (found != nullptr) *found = now != data_.end();
    if (current != nullptr) *current = now != data_.end() ? now->second : std::string();
  }
  if (did) cv_.notify_all();
  if (swapped != nullptr) *swapped = did;
  return Status::OK();
}

void KvStore::EraseScope(const std::string& prefix) {
  // Erasing never completes a wait, so no waiter needs waking.
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.lower_bound(prefix);
  while (it != data_.end() && it->first.compare(0, prefix.size(), prefix) == 0) {
    it = data_.erase(it);
  }
}

void KvStore::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
}

KvStats KvStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  KvStats s = stats_;
  s.keys = data_.size();
  return s;
}

}  // namespace hvd::launcherd
