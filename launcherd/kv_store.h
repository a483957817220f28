// The launcher's rendezvous key-value store: set, get, wait with deadline, add, compare-and-set.
// Thread-safe and in memory; served to tools over gRPC (rendezvous_service.cc) and to the runtime
// over a small TCP protocol (kv_server.cc). Keys are full paths such as
// "job/<id>/attempt/<n>/host/3"; a finished job's keys are dropped with EraseScope.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "hvd/status.h"

namespace hvd::launcherd {

struct KvStats {
  uint64_t sets = 0, gets = 0, waits = 0, adds = 0, cas = 0;
  uint64_t keys = 0;
};

class KvStore {
 public:
  // Called after every Set, outside the store's lock, with the key and the value written.
  using Observer = std::function<void(const std::string& key, const std::string& value)>;

  KvStore() = default;
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  Status Set(const std::string& key, const std::string& value);
  Status Get(const std::string& key, std::string* value);  // NotFound
  // DeadlineExceeded lists the keys still missing; Cancelled after Shutdown().
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  Status Add(const std::string& key, int64_t delta, int64_t* value);
  // Sets `desired` if the key is absent (expect_absent) or equals `expected`. *swapped says whether
  // it did; *current/*found give the value now stored.
  Status CompareAndSet(const std::string& key, bool expect_absent, const std::string& expected,
                       const std::string& desired, bool* swapped, std::string* current,
                       bool* found);
  // Drops every key starting with `prefix` (a finished job's "job/<id>/").
  void EraseScope(const std::string& prefix);
  // Wakes every waiter with Cancelled; later waits fail at once.
  void Shutdown();

  KvStats stats() const;

  // REQUIRES: called before the store is shared (it is read without a lock afterwards).
  void SetObserver(Observer observer) { observer_ = std::move(observer); }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> data_ GUARDED_BY(mu_);
  bool shutdown_ GUARDED_BY(mu_) = false;
  KvStats stats_ GUARDED_BY(mu_);
  Observer observer_;
};

}  // namespace hvd::launcherd
