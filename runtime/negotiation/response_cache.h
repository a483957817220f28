// The response cache (Horovod's): once a key has been negotiated through the coordinator, every
// rank keeps the agreed Response in the same slot. Afterwards a rank that submits the same key
// with the same specs only sets the slot's bit in a bit vector that all ranks AND together each
// cycle; a set bit in the result means "ready everywhere", with no gather through rank 0.
//
// Consistency: every rank applies the same Put/Touch/Erase calls in the same order (they are
// driven by the responses every rank executes and by the bit vectors every rank sees), so slot
// numbers and LRU order agree on all ranks without ever being exchanged.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "negotiation/message.h"

namespace hvd::runtime::negotiation {

// HVD_CACHE_CAPACITY's default (Horovod's): the one value the setting, the engine's and each
// process set's options start from.
inline constexpr uint32_t kDefaultCacheCapacity = 1024;

class ResponseCache {
 public:
  enum class Match {
    kMiss,   // no entry for the key: negotiate through the coordinator
    kHit,    // entry agrees with this rank's request: set its bit
    kStale,  // entry exists but this rank's request differs: invalidate it everywhere
  };

  // capacity 0 disables the cache (every lookup misses, Put does nothing).
  explicit ResponseCache(uint32_t capacity);
  ResponseCache(const ResponseCache&) = delete;
  ResponseCache& operator=(const ResponseCache&) = delete;

  uint32_t capacity() const { return capacity_; }
  // One past the highest slot in use: the number of bits worth exchanging.
  uint32_t used_slots() const;
  // Bumped by every change to which response a slot holds.
  uint64_t generation() const { return generation_; }

  Match Lookup(const Request& request, int rank, uint32_t* slot) const;

  // Whether responses of this kind may be cached at all (OK allreduce, allgather, broadcast,
  // reducescatter; not alltoall, barrier or join, whose per-call data differs).
  static bool Cacheable(const Response& response);

  // Stores `response` (replacing an entry of the same key), evicting the least recently used
  // entry when full. REQUIRES: Cacheable(response).
  void Put(const Response& response);
  // Marks `slot` as just used. REQUIRES: Occupied(slot).
  void Touch(uint32_t slot);
  void Erase(uint32_t slot);
  // Erases every entry of `type` (used when the set of joined ranks changes: allgather's cached
  // per-rank row counts no longer hold).
  void EraseType(OpType type);

  bool Occupied(uint32_t slot) const { return slot < slots_.size() && slots_[slot].has_value(); }
  const Response& Get(uint32_t slot) const { return slots_[slot]->response; }

 private:
  struct Entry {
    Response response;
    std::list<uint32_t>::iterator lru_pos;
  };

  uint32_t capacity_;
  std::vector<std::optional<Entry>> slots_;
  std::unordered_map<std::string, uint32_t> by_key_;
  std::list<uint32_t> lru_;  // front = least recently used
  uint64_t generation_ = 0;
};

}  // namespace hvd::runtime::negotiation
