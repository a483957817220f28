#include "negotiation/coordinator.h"

#include <algorithm>
#include <cstdint>
#include <span>

namespace hvd::runtime::negotiation {

Coordinator::Coordinator(int size, double stall_check_seconds, double stall_shutdown_seconds,
                         std::vector<int> global_ranks)
    : size_(size),
      global_ranks_(std::move(global_ranks)),
      stall_(stall_check_seconds, stall_shutdown_seconds) {}

void Coordinator::Add(const RequestList& list, Clock::time_point now) {
  for (const Request& r : list.requests) {
    if (r.type == OpType::kJoin) {
      joined_.insert(r.rank);
      last_joined_ = r.rank;
      continue;
    }
    auto [it, inserted] = table_.try_emplace(r.key);
    Entry& e = it->second;
    // The submitting rank may have waited before this request reached us (cache path, stalls).
    Clock::time_point submitted = now - std::chrono::milliseconds(std::max<int64_t>(0, r.age_ms));
    if (inserted) {
      e.by_rank.resize(size_);
      e.first_seen = submitted;
      e.order = next_order_++;
    } else {
      e.first_seen = std::min(e.first_seen, submitted);
    }
    if (r.rank >= 0 && r.rank < size_) e.by_rank[r.rank] = r;
  }
}

bool Coordinator::Ready(const Entry& e) const {
  for (int r = 0; r < size_; ++r) {
    if (!e.by_rank[r].has_value() && joined_.count(r) == 0) return false;
  }
  return true;
}

namespace {

// `root`: the broadcast root as the user named it (a job rank; r.root is a rank of the set).
std::string Describe(const Request& r, int root) {
  std::string s = OpTypeName(r.type);
  for (const TensorSpec& t : r.tensors) {
    s += " ";
    s += DataTypeName(t.dtype);
    s += " " + ShapeString(t.shape);
  }
  if (r.gpu) s += " on a GPU";
  if (r.type == OpType::kAllreduce || r.type == OpType::kReducescatter) {
    s += std::string(" op=") + std::string(ReduceOpName(r.reduce_op));
    if (r.prescale != 1.0) s += " prescale=" + std::to_string(r.prescale);
    if (r.postscale != 1.0) s += " postscale=" + std::to_string(r.postscale);
  }
  if (r.type == OpType::kBroadcast) {
    s += " root=" + std::to_string(root);
    if (r.sized_by_root) s += " (sized by the root)";
  }
  if (r.type == OpType::kAlltoall) s += " splits=" + ShapeString(r.splits);
  if (r.type == OpType::kAddProcessSet) s += " ranks=" + ShapeString(r.splits);
  if (r.type == OpType::kRemoveProcessSet) s += " id=" + std::to_string(r.root);
  return s;
}

// a + b, or INT64_MAX past it (b < 0 counts as past it: no count is negative).
int64_t SaturatingAdd(int64_t a, int64_t b) {
  return b < 0 || a > INT64_MAX - b ? INT64_MAX : a + b;
}

// "" when `rows` rows of `t` (its dimensions 1..) fit in a tensor; else the error for the key.
std::string OutputTooLarge(const std::string& key, const TensorSpec& t, int64_t rows) {
  uint64_t bytes = 0;
  if (t.shape.empty()) return "";
  const std::span<const int64_t> row_shape = std::span(t.shape).subspan(1);
  if (BytesWithin(t.dtype, rows, row_shape, &bytes)) return "";
  return "'" + key + "': the result would have " + std::to_string(rows) + " rows of " +
         ShapeString(std::vector<int64_t>(row_shape.begin(), row_shape.end())) + " " +
         std::string(DataTypeName(t.dtype)) +
         ", more than 2^48 bytes (256 TiB); some rank's first dimension is wrong";
}

// Whether two ranks' requests for one key may run together.
bool Compatible(const Request& a, const Request& b) {
  if (a.type != b.type || a.gpu != b.gpu || a.tensors.size() != b.tensors.size()) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const TensorSpec& x = a.tensors[i];
    const TensorSpec& y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype) return false;
    if (a.type == OpType::kBroadcast && (a.sized_by_root || b.sized_by_root)) {
      continue;  // the others take the root's shape: checked below
    }
    if (a.type == OpType::kAllgather || a.type == OpType::kAlltoall) {
      if (x.shape.size() != y.shape.size() || x.shape.empty()) return false;
      if (!std::equal(x.shape.begin() + 1, x.shape.end(), y.shape.begin() + 1)) return false;
    } else if (x.shape != y.shape) {
      return false;
    }
  }
  switch (a.type) {
    case OpType::kAllreduce:
    case OpType::kReducescatter:
      return a.reduce_op == b.reduce_op && a.prescale == b.prescale && a.postscale == b.postscale;
    case OpType::kBroadcast:
      return a.root == b.root && a.sized_by_root == b.sized_by_root;
    case OpType::kAddProcessSet:
      return a.splits == b.splits;
    case OpType::kRemoveProcessSet:
      return a.root == b.root;
    default:
      return true;
  }
}

}  // namespace

Response Coordinator::Build(const std::string& key, const Entry& e) const {
  const Request* first = nullptr;
  std::vector<int> present;
  for (int r = 0; r < size_; ++r) {
    if (!e.by_rank[r]) continue;
    present.push_back(r);
    if (first == nullptr) first = &*e.by_rank[r];
  }
  Response resp;
  resp.key = key;
  resp.type = first->type;
  resp.tensors = first->tensors;
  resp.reduce_op = first->reduce_op;
  resp.prescale = first->prescale;
  resp.postscale = first->postscale;
  resp.root = first->root;
  resp.gpu = first->gpu;
  resp.contributors = static_cast<int32_t>(present.size());

  bool agree = std::all_of(present.begin(), present.end(),
                           [&](int r) { return Compatible(*first, *e.by_rank[r]); });
  if (!agree) {
    auto root_of = [&](const Request& q) {
      return q.root >= 0 && q.root < size_ ? Global(q.root) : q.root;
    };
    resp.error = "mismatched requests for '" + key + "':";
    for (int r : present) {
      resp.error += " rank " + std::to_string(Global(r)) + " submitted " +
                    Describe(*e.by_rank[r], root_of(*e.by_rank[r])) + ";";
    }
    resp.error += " every rank must submit the same operation, dtype and shape";
    for (int r : present) {
      if (e.by_rank[r]->gpu != first->gpu) {
        resp.error +=
            " (and the same kind of memory: GPU tensors on every rank, or host tensors "
            "on every rank)";
        break;
      }
    }
    if (first->type == OpType::kAllgather || first->type == OpType::kAlltoall) {
      resp.error += " (the first dimension may differ)";
    }
    return resp;
  }

  std::vector<int> joined(joined_.begin(), joined_.end());
  auto joined_text = [&] {
    std::string s;
    for (int r : joined) s += (s.empty() ? "" : ", ") + std::to_string(Global(r));
    return s;
  };
  switch (resp.type) {
    case OpType::kBroadcast:
      if (resp.root < 0 || resp.root >= size_) {
        resp.error = "broadcast '" + key + "': root " + std::to_string(resp.root) +
                     " is not a rank (size " + std::to_string(size_) + ")";
      } else if (!e.by_rank[resp.root]) {
        resp.error = "broadcast '" + key + "': root rank " + std::to_string(Global(resp.root)) +
                     " has joined and has no tensor to send";
      } else {
        resp.tensors = e.by_rank[resp.root]->tensors;  // the root's shape is the one that counts
        resp.sized_by_root = first->sized_by_root;
      }
      break;
    case OpType::kAllgather:
      // Tensor-major: rows of tensor t on rank r at t * size + r (a grouped allgather has several).
      resp.first_dims.assign(resp.tensors.size() * size_, 0);
      for (size_t t = 0; t < resp.tensors.size() && resp.error.empty(); ++t) {
        int64_t rows = 0;
        for (int r : present) {
          resp.first_dims[t * size_ + r] = e.by_rank[r]->tensors[t].shape[0];
          rows = SaturatingAdd(rows, resp.first_dims[t * size_ + r]);
        }
        resp.error = OutputTooLarge(key, resp.tensors[t], rows);
      }
      break;
    case OpType::kAlltoall:
      if (!joined.empty()) {
        resp.error = "alltoall '" + key + "' cannot run while ranks " + joined_text() +
                     " have joined (they have no rows to exchange)";
        break;
      }
      resp.splits.clear();
      for (int r = 0; r < size_; ++r) {
        const auto& s = e.by_rank[r]->splits;
        resp.splits.insert(resp.splits.end(), s.begin(), s.end());
      }
      // What each rank receives: its column of the matrix.
      for (int to = 0; to < size_ && resp.error.empty() &&
                       resp.splits.size() == static_cast<size_t>(size_) * size_;
           ++to) {
        int64_t rows = 0;
        for (int from = 0; from < size_; ++from) {
          rows = SaturatingAdd(rows, resp.splits[static_cast<size_t>(from) * size_ + to]);
        }
        resp.error = OutputTooLarge(key, resp.tensors[0], rows);
      }
      break;
    case OpType::kReducescatter:
      for (const TensorSpec& t : resp.tensors) {
        if (t.shape.empty()) {
          resp.error = "reducescatter '" + key + "': tensor '" + t.name +
                       "' is a scalar, which cannot be scattered; give a tensor with a first "
                       "dimension";
          break;
        }
      }
      break;
    case OpType::kAddProcessSet:
      resp.splits = first->splits;  // the new set's ranks (agreed by Compatible above)
      break;
    default:
      break;
  }
  return resp;
}

ResponseList Coordinator::Compute(Clock::time_point now) {
  ResponseList out;
  std::vector<std::pair<uint64_t, std::string>> ready;
  std::vector<stall::PendingKey> waiting;
  for (const auto& [key, e] : table_) {
    if (Ready(e)) {
      ready.emplace_back(e.order, key);
    }
  }
  std::sort(ready.begin(), ready.end());
  for (const auto& [order, key] : ready) {
    out.responses.push_back(Build(key, table_.at(key)));
    table_.erase(key);
    stall_.Forget(key);
  }
  verdicts_ = stall_.Inspect(Pending(), now);
  for (const stall::StallVerdict& v : verdicts_) {
    const std::string& key = v.pending.key;
    Response r;
    const Entry& e = table_.at(key);
    for (const auto& req : e.by_rank) {
      if (req) {
        r.type = req->type;
        r.tensors = req->tensors;
        break;
      }
    }
    r.key = key;
    r.error = v.message;
    r.stalled_ranks.assign(v.pending.missing.begin(), v.pending.missing.end());
    out.responses.push_back(std::move(r));
    table_.erase(key);
    stall_.Forget(key);
  }
  if (static_cast<int>(joined_.size()) == size_) {
    Response r;
    r.type = OpType::kJoin;
    r.key = "__join__";
    r.last_joined_rank = last_joined_ < 0 ? -1 : Global(last_joined_);
    out.responses.push_back(std::move(r));
    joined_.clear();
  }
  out.joined_ranks.assign(joined_.begin(), joined_.end());
  return out;
}

bool Coordinator::OldestStall(Clock::time_point now, stall::PendingKey* out) const {
  if (table_.empty() || stall_.check_seconds() <= 0) return false;
  const std::vector<stall::PendingKey> pending = Pending();
  const stall::PendingKey* oldest = nullptr;
  for (const stall::PendingKey& p : pending) {
    if (!p.missing.empty() && (oldest == nullptr || p.first_seen < oldest->first_seen)) oldest = &p;
  }
  if (oldest == nullptr ||
      now - oldest->first_seen < std::chrono::duration<double>(stall_.check_seconds())) {
    return false;
  }
  *out = *oldest;
  stall::FindCrossing(pending, out);
  return true;
}

bool Coordinator::HasStall(Clock::time_point now, double seconds) const {
  const auto limit = std::chrono::duration<double>(seconds);
  for (const auto& [key, e] : table_) {
    if (now - e.first_seen < limit) continue;
    for (int r = 0; r < size_; ++r) {
      if (!e.by_rank[r].has_value() && joined_.count(r) == 0) return true;
    }
  }
  return false;
}

std::vector<stall::PendingKey> Coordinator::Pending() const {
  std::vector<stall::PendingKey> out;
  for (const auto& [key, e] : table_) {
    stall::PendingKey p;
    p.key = key;
    p.first_seen = e.first_seen;
    for (int r = 0; r < size_; ++r) {
      if (e.by_rank[r]) {
        p.submitted.push_back(Global(r));
        p.op = OpTypeName(e.by_rank[r]->type);
      } else if (joined_.count(r) == 0) {
        p.missing.push_back(Global(r));
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace hvd::runtime::negotiation
