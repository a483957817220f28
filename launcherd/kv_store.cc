// The launcher's rendezvous store: a map under one mutex. Waits are records, not threads: each
// waiter is indexed by the keys it still misses, so a write wakes exactly the waits it completes
// and a waiting rank costs the launcher a few bytes (kv_server.cc parks its connections on them).
// The blocking Wait is WaitAsync plus a condition variable, for the gRPC service and tests.
#include "launcherd/kv_store.h"

#include <algorithm>
#include <memory>
#include <set>

#include "base/kv_counter.h"
#include "base/rendezvous_keys.h"

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

std::string ScopeName(const std::string& scope) {
  if (scope.empty()) return "the keys outside job/<id>/";
  return "job " + scope.substr(4, scope.size() - 5);
}

std::string Bytes(size_t n) {
  if (n >= (1u << 20) && n % (1u << 20) == 0) return std::to_string(n >> 20) + " MiB";
  return std::to_string(n) + " bytes";
}

bool Under(const std::string& key, const std::string& prefix) {
  return key.compare(0, prefix.size(), prefix) == 0;
}

// Why a wait under an erased scope ended, in the job's terms where the scope is a job's
// ("job/<id>/") or an attempt's ("job/<id>/attempt/<n>/"), which is what the launcher erases.
std::string ScopeEnded(const std::string& prefix) {
  const std::string scope = base::JobPrefixOf(prefix);
  const std::string tail =
      "the rendezvous keys under '" + prefix + "' were dropped, so this wait can never complete";
  if (!scope.empty() && scope == prefix) return ScopeName(scope) + " ended: " + tail;
  if (!scope.empty() && prefix.compare(scope.size(), 8, "attempt/") == 0) {
    return "attempt " + prefix.substr(scope.size() + 8, prefix.size() - scope.size() - 9) + " of " +
           ScopeName(scope) + " ended (the job restarted or finished): " + tail;
  }
  return std::string(kName) + ": " + tail;
}

}  // namespace

Status KvStore::PutLocked(const std::string& key, const std::string& value, Ready* ready) {
  if (key.size() > limits_.max_key_bytes) {
    return InvalidArgument(std::string(kName) + ": a key of " + std::to_string(key.size()) +
                           " bytes exceeds the limit of " + Bytes(limits_.max_key_bytes) + " ('" +
                           key.substr(0, 64) + "...')");
  }
  if (value.size() > limits_.max_value_bytes) {
    return InvalidArgument(std::string(kName) + ": the value of '" + key + "' (" +
                           std::to_string(value.size()) + " bytes) exceeds the limit of " +
                           Bytes(limits_.max_value_bytes) +
                           " per value; the rendezvous store is for small values (addresses, ids)");
  }
  auto it = data_.find(key);
  const std::string scope = base::JobPrefixOf(key);
  Usage& u = usage_[scope];
  const size_t old_bytes = it == data_.end() ? 0 : key.size() + it->second.size();
  const size_t new_bytes = key.size() + value.size();
  const size_t grow = new_bytes > old_bytes ? new_bytes - old_bytes : 0;
  auto refuse = [&](const std::string& what) HVD_REQUIRES(mu_) {
    if (u.keys == 0) usage_.erase(scope);
    return FailedPrecondition(std::string(kName) + ": writing '" + key + "' would exceed " + what +
                              "; nothing was written (a job's rendezvous holds addresses and "
                              "ids, not data: is a rank writing in a loop?)");
  };
  if (it == data_.end() && u.keys + 1 > limits_.max_keys_per_job) {
    return refuse("the quota of " + std::to_string(limits_.max_keys_per_job) + " keys of " +
                  ScopeName(scope));
  }
  if (u.bytes + grow > limits_.max_bytes_per_job) {
    return refuse("the quota of " + Bytes(limits_.max_bytes_per_job) + " of keys and values of " +
                  ScopeName(scope) + " (it holds " + std::to_string(u.bytes) + " bytes)");
  }
  if (total_bytes_ + grow > limits_.max_total_bytes) {
    return refuse("the launcher's limit of " + Bytes(limits_.max_total_bytes) +
                  " of rendezvous keys and values for all jobs together (" + ScopeName(scope) +
                  " holds " + std::to_string(u.bytes) + " bytes)");
  }
  u.bytes = u.bytes - old_bytes + new_bytes;
  total_bytes_ = total_bytes_ - old_bytes + new_bytes;
  if (it != data_.end()) {
    it->second = value;
    return Status::OK();
  }
  ++u.keys;
  data_.emplace(key, value);
  auto range = missing_.equal_range(key);
  for (auto w = range.first; w != range.second; ++w) {
    auto waiter = waiters_.find(w->second);
    if (waiter != waiters_.end() && --waiter->second.missing == 0) {
      ready->emplace_back(std::move(waiter->second.done), Status::OK());
      waiters_.erase(waiter);
    }
  }
  missing_.erase(range.first, range.second);
  return Status::OK();
}

void KvStore::DropLocked(std::map<std::string, std::string>::iterator it) {
  const std::string scope = base::JobPrefixOf(it->first);
  const size_t bytes = it->first.size() + it->second.size();
  auto u = usage_.find(scope);
  if (u != usage_.end()) {
    u->second.bytes -= std::min(u->second.bytes, bytes);
    if (--u->second.keys == 0) usage_.erase(u);
  }
  total_bytes_ -= std::min(total_bytes_, bytes);
  data_.erase(it);
}

void KvStore::RemoveWaiterLocked(uint64_t id) {
  auto w = waiters_.find(id);
  if (w == waiters_.end()) return;
  for (const std::string& k : w->second.keys) {
    auto range = missing_.equal_range(k);
    for (auto m = range.first; m != range.second; ++m) {
      if (m->second == id) {
        missing_.erase(m);
        break;
      }
    }
  }
  waiters_.erase(w);
}

void KvStore::Run(Ready& ready) {
  for (auto& [done, status] : ready) done(status);
}

Status KvStore::Set(const std::string& key, const std::string& value) {
  Ready ready;
  {
    base::MutexLock lock(&mu_);
    ++stats_.sets;
    HVD_RETURN_IF_ERROR(PutLocked(key, value, &ready));
  }
  Run(ready);
  if (observer_) observer_(key, value);
  return Status::OK();
}

Status KvStore::Get(const std::string& key, std::string* value) {
  base::MutexLock lock(&mu_);
  ++stats_.gets;
  auto it = data_.find(key);
  if (it == data_.end()) return NotFound(std::string(kName) + ": key '" + key + "' not set");
  *value = it->second;
  return Status::OK();
}

uint64_t KvStore::WaitAsync(const std::vector<std::string>& keys, WaitCallback done) {
  Status now;
  {
    base::MutexLock lock(&mu_);
    ++stats_.waits;
    if (shutdown_) {
      now = Status(StatusCode::kCancelled,
                   std::string(kName) + " is shut down: the launcher is stopping");
    } else {
      std::set<std::string> missing;
      for (const auto& k : keys) {
        if (data_.count(k) == 0) missing.insert(k);
      }
      if (!missing.empty()) {
        const uint64_t id = next_wait_++;
        Waiter& w = waiters_[id];
        w.keys.assign(missing.begin(), missing.end());
        w.missing = missing.size();
        w.done = std::move(done);
        for (const auto& k : w.keys) missing_.emplace(k, id);
        return id;
      }
    }
  }
  done(now);
  return 0;
}

bool KvStore::CancelWait(uint64_t id) {
  base::MutexLock lock(&mu_);
  if (waiters_.count(id) == 0) return false;
  RemoveWaiterLocked(id);
  return true;
}

Status KvStore::WaitTimedOut(const std::vector<std::string>& keys,
                             std::chrono::milliseconds timeout) {
  std::vector<std::string> missing;
  {
    base::MutexLock lock(&mu_);
    for (const auto& k : keys) {
      if (data_.count(k) == 0) missing.push_back(k);
    }
  }
  const std::string what =
      std::to_string(missing.size()) + (missing.size() == 1 ? " key" : " keys");
  return DeadlineExceeded(std::string(kName) + ": timed out after " +
                          std::to_string(timeout.count()) + " ms waiting for " + what + ": " +
                          ListKeys(missing));
}

Status KvStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto wait =
      std::clamp<std::chrono::milliseconds>(timeout, std::chrono::milliseconds(0), kMaxWait);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  // Shared with the callback, which may still be running when a timed-out wait returns.
  struct State {
    base::Mutex mu;
    base::CondVar cv;
    bool done = false;
    Status status;
  };
  auto state = std::make_shared<State>();
  const uint64_t id = WaitAsync(keys, [state](const Status& s) {
    base::MutexLock lock(&state->mu);
    state->done = true;
    state->status = s;
    state->cv.NotifyAll();
  });
  base::MutexLock lock(&state->mu);
  if (!state->cv.WaitUntil(lock, deadline, [&]() HVD_REQUIRES(state->mu) { return state->done; })) {
    lock.Unlock();
    if (CancelWait(id)) return WaitTimedOut(keys, timeout);
    lock.Lock();  // it ended as we gave up: its callback is about to say how
    state->cv.Wait(lock, [&]() HVD_REQUIRES(state->mu) { return state->done; });
  }
  return state->status;
}

Status KvStore::Add(const std::string& key, int64_t delta, int64_t* value) {
  int64_t sum = 0;
  Ready ready;
  {
    base::MutexLock lock(&mu_);
    ++stats_.adds;
    int64_t current = 0;
    auto it = data_.find(key);
    // The runtime's stores parse counters the same way, so a job behaves alike on every store.
    if (it != data_.end()) {
      HVD_RETURN_IF_ERROR(
          base::ParseCounter(kName, key, it->second, &current));
    }
    HVD_RETURN_IF_ERROR(
        base::AddCounter(kName, key, current, delta, &sum));
    HVD_RETURN_IF_ERROR(PutLocked(key, std::to_string(sum), &ready));
  }
  Run(ready);
  if (value != nullptr) *value = sum;
  return Status::OK();
}

Status KvStore::CompareAndSet(const std::string& key, bool expect_absent,
                              const std::string& expected, const std::string& desired,
                              bool* swapped, std::string* current, bool* found) {
  bool did = false;
  Ready ready;
  {
    base::MutexLock lock(&mu_);
    ++stats_.cas;
    auto it = data_.find(key);
    const bool present = it != data_.end();
    if (expect_absent ? !present : (present && it->second == expected)) {
      HVD_RETURN_IF_ERROR(PutLocked(key, desired, &ready));
      did = true;
    }
    auto now = data_.find(key);
    if (found != nullptr) *found = now != data_.end();
    if (current != nullptr) *current = now != data_.end() ? now->second : std::string();
  }
  Run(ready);
  if (swapped != nullptr) *swapped = did;
  return Status::OK();
}

void KvStore::EraseScope(const std::string& prefix, const std::string& reason) {
  Ready ready;
  {
    base::MutexLock lock(&mu_);
    auto it = data_.lower_bound(prefix);
    while (it != data_.end() && Under(it->first, prefix)) DropLocked(it++);
    // A wait on a dropped key could only end at its timeout, long after its job: end it now.
    const Status ended(StatusCode::kAborted, reason.empty() ? ScopeEnded(prefix) : reason);
    std::vector<uint64_t> ids;
    for (const auto& [id, w] : waiters_) {
      if (std::any_of(w.keys.begin(), w.keys.end(),
                      [&](const std::string& k) { return Under(k, prefix); })) {
        ids.push_back(id);
      }
    }
    for (uint64_t id : ids) {
      ready.emplace_back(std::move(waiters_[id].done), ended);
      RemoveWaiterLocked(id);
    }
  }
  Run(ready);
}

void KvStore::Shutdown() {
  Ready ready;
  {
    base::MutexLock lock(&mu_);
    shutdown_ = true;
    const Status cancelled(StatusCode::kCancelled,
                           std::string(kName) + " is shut down: the launcher is stopping");
    for (auto& [id, w] : waiters_) ready.emplace_back(std::move(w.done), cancelled);
    waiters_.clear();
    missing_.clear();
  }
  Run(ready);
}

KvStats KvStore::stats() const {
  base::MutexLock lock(&mu_);
  KvStats s = stats_;
  s.keys = data_.size();
  s.bytes = total_bytes_;
  s.pending_waits = waiters_.size();
  return s;
}

}  // namespace hvd::launcherd
