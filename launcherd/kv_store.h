// The launcher's rendezvous key-value store: set, get, wait with deadline, add, compare-and-set.
// Thread-safe and in memory; served to tools over gRPC (rendezvous_service.cc) and to the runtime
// over a small TCP protocol (kv_server.cc). Keys are full paths such as
// "job/<id>/attempt/<n>/host/3"; a finished job's keys are dropped with EraseScope, which also ends
// every wait on them.
//
// Bounded (docs/rendezvous.md, "Limits"): keys and values have a maximum size, and each job
// ("job/<id>/...", every other key counting as one more job) has a quota of keys and of bytes; a
// write over a limit fails with a message naming the limit and the job, and writes nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "hvd/status.h"

namespace hvd::launcherd {

struct KvStats {
  uint64_t sets = 0, gets = 0, waits = 0, adds = 0, cas = 0;
  uint64_t keys = 0;
  uint64_t bytes = 0;          // keys and values held
  uint64_t pending_waits = 0;  // waits not yet ended
};

struct KvLimits {
  size_t max_key_bytes = 1024;
  size_t max_value_bytes = 1u << 20;
  size_t max_keys_per_job = 65536;
  size_t max_bytes_per_job = 64u << 20;  // keys + values
  size_t max_total_bytes = 512u << 20;   // every job together
};

class KvStore {
 public:
  // Called after every Set, outside the store's lock, with the key and the value written.
  using Observer = std::function<void(const std::string& key, const std::string& value)>;
  // How a wait ended: OK, Aborted (its scope was erased: the job ended), Cancelled (Shutdown).
  using WaitCallback = std::function<void(const Status&)>;

  explicit KvStore(KvLimits limits = KvLimits()) : limits_(limits) {}
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  // InvalidArgument for an oversized key or value, FailedPrecondition at a quota.
  Status Set(const std::string& key, const std::string& value);
  Status Get(const std::string& key, std::string* value);  // NotFound
  // Blocks. DeadlineExceeded lists the keys still missing; Aborted when EraseScope drops a scope
  // holding one of the keys; Cancelled after Shutdown().
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // The same without a thread: `done` runs exactly once, on the thread that ends the wait (inline
  // when it is over at once), outside the store's lock, unless CancelWait(id) returns true first.
  // The caller enforces its own deadline with CancelWait + WaitTimedOut.
  uint64_t WaitAsync(const std::vector<std::string>& keys, WaitCallback done);
  // True when the wait was still pending: it is gone and `done` will never run. False when `done`
  // has run or is running.
  bool CancelWait(uint64_t id);
  // The DeadlineExceeded a wait on `keys` gives up with, listing the keys still missing.
  Status WaitTimedOut(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  Status Add(const std::string& key, int64_t delta, int64_t* value);
  // Sets `desired` if the key is absent (expect_absent) or equals `expected`. *swapped says whether
  // it did; *current/*found give the value now stored.
  Status CompareAndSet(const std::string& key, bool expect_absent, const std::string& expected,
                       const std::string& desired, bool* swapped, std::string* current,
                       bool* found);
  // Drops every key starting with `prefix` (a finished job's "job/<id>/", an ended attempt's
  // "job/<id>/attempt/<n>/") and ends every wait naming a key under it with Aborted: `reason`, or
  // a message saying the scope ended when it is empty.
  void EraseScope(const std::string& prefix, const std::string& reason = "");
  // Wakes every waiter with Cancelled; later waits fail at once.
  void Shutdown();

  KvStats stats() const;
  const KvLimits& limits() const { return limits_; }

  // REQUIRES: called before the store is shared (it is read without a lock afterwards).
  void SetObserver(Observer observer) { observer_ = std::move(observer); }

 private:
  struct Usage {
    size_t keys = 0, bytes = 0;
  };
  struct Waiter {
    std::vector<std::string> keys;
    size_t missing = 0;
    WaitCallback done;
  };
  using Ready = std::vector<std::pair<WaitCallback, Status>>;

  // Writes key=value within the limits; a new key completes the waits it was the last missing of
  // (their callbacks go to *ready, to run after the lock is released).
  Status PutLocked(const std::string& key, const std::string& value, Ready* ready)
      HVD_REQUIRES(mu_);
  void DropLocked(std::map<std::string, std::string>::iterator it) HVD_REQUIRES(mu_);
  void RemoveWaiterLocked(uint64_t id) HVD_REQUIRES(mu_);
  static void Run(Ready& ready);

  const KvLimits limits_;
  mutable base::Mutex mu_;
  std::map<std::string, std::string> data_ HVD_GUARDED_BY(mu_);
  std::map<std::string, Usage> usage_ HVD_GUARDED_BY(mu_);  // by job scope ("job/<id>/" or "")
  size_t total_bytes_ HVD_GUARDED_BY(mu_) = 0;
  std::unordered_map<uint64_t, Waiter> waiters_ HVD_GUARDED_BY(mu_);
  // A key some waiter still misses -> that waiter: a write wakes only the waits it completes.
  std::unordered_multimap<std::string, uint64_t> missing_ HVD_GUARDED_BY(mu_);
  uint64_t next_wait_ HVD_GUARDED_BY(mu_) = 1;
  bool shutdown_ HVD_GUARDED_BY(mu_) = false;
  KvStats stats_ HVD_GUARDED_BY(mu_);
  Observer observer_;
};

}  // namespace hvd::launcherd
