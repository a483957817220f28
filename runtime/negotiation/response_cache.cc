#include "negotiation/response_cache.h"

namespace hvd::runtime::negotiation {

ResponseCache::ResponseCache(uint32_t capacity) : capacity_(capacity) {}

uint32_t ResponseCache::used_slots() const {
  for (size_t i = slots_.size(); i > 0; --i) {
    if (slots_[i - 1].has_value()) return static_cast<uint32_t>(i);
  }
  return 0;
}

bool ResponseCache::Cacheable(const Response& r) {
  if (!r.ok()) return false;
  switch (r.type) {
    case OpType::kBroadcast:
      return !r.sized_by_root;  // the non-root ranks' requests carry no shape to compare
    case OpType::kAllreduce:
    case OpType::kAllgather:
    case OpType::kReducescatter:
      return true;
    default:
      return false;
  }
}

namespace {

// True when the cached response describes exactly what `req` asks of this rank.
bool Agrees(const Response& r, const Request& req, int rank) {
  if (r.type != req.type || r.gpu != req.gpu || r.tensors.size() != req.tensors.size()) {
    return false;
  }
  if (r.type == OpType::kAllreduce || r.type == OpType::kReducescatter) {
    if (r.reduce_op != req.reduce_op || r.prescale != req.prescale ||
        r.postscale != req.postscale) {
      return false;
    }
  }
  if (r.type == OpType::kBroadcast && (r.root != req.root || req.sized_by_root)) return false;
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const TensorSpec& a = r.tensors[i];
    const TensorSpec& b = req.tensors[i];
    if (a.name != b.name || a.dtype != b.dtype) return false;
    if (r.type == OpType::kAllgather) {
      // Rows may differ per rank: compare this rank's row count and the trailing dims.
      if (b.shape.empty() || a.shape.size() != b.shape.size()) return false;
      const size_t size = r.first_dims.size() / r.tensors.size();
      if (rank >= static_cast<int>(size) || r.first_dims[i * size + rank] != b.shape[0]) {
        return false;
      }
      if (!std::equal(a.shape.begin() + 1, a.shape.end(), b.shape.begin() + 1)) return false;
    } else if (a.shape != b.shape) {
      return false;
    }
  }
  return true;
}

}  // namespace

ResponseCache::Match ResponseCache::Lookup(const Request& req, int rank, uint32_t* slot) const {
  auto it = by_key_.find(req.key);
  if (it == by_key_.end()) return Match::kMiss;
  *slot = it->second;
  return Agrees(slots_[it->second]->response, req, rank) ? Match::kHit : Match::kStale;
}

void ResponseCache::Put(const Response& response) {
  if (capacity_ == 0) return;
  auto existing = by_key_.find(response.key);
  if (existing != by_key_.end()) Erase(existing->second);
  if (by_key_.size() >= capacity_) Erase(lru_.front());
  // The lowest free slot keeps the exchanged bit vector short.
  uint32_t slot = 0;
  while (slot < slots_.size() && slots_[slot].has_value()) ++slot;
  if (slot == slots_.size()) slots_.emplace_back();
  lru_.push_back(slot);
  slots_[slot] = Entry{response, std::prev(lru_.end())};
  by_key_[response.key] = slot;
  ++generation_;
}

void ResponseCache::Touch(uint32_t slot) {
  Entry& e = *slots_[slot];
  lru_.splice(lru_.end(), lru_, e.lru_pos);
}

void ResponseCache::Erase(uint32_t slot) {
  if (!Occupied(slot)) return;
  Entry& e = *slots_[slot];
  lru_.erase(e.lru_pos);
  by_key_.erase(e.response.key);
  slots_[slot].reset();
  ++generation_;
}

void ResponseCache::EraseType(OpType type) {
  for (uint32_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].has_value() && slots_[s]->response.type == type) Erase(s);
  }
}

}  // namespace hvd::runtime::negotiation
