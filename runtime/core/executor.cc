#include "core/executor.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "collectives/reduce.h"
#include "fusion/fusion_planner.h"

namespace hvd::runtime::core {

using fusion::OpType;
using fusion::Response;
using fusion::TensorSpec;

struct BatchRef {
  const Response* response;
  size_t tensor;
  internal::Operation* op;  // null: joined rank
};

namespace {

size_t Bytes(const TensorSpec& t) {
  return static_cast<size_t>(t.num_elements()) * DataTypeSize(t.dtype);
}

template <typename T>
void Fill(void* p, size_t n, T v) {
  std::fill_n(static_cast<T*>(p), n, v);
}

// What a joined rank contributes so that it does not change the result.
void FillIdentity(void* buf, size_t count, DataType dtype, ReduceOp op) {
  // Adasum: a zero vector leaves the other operand unchanged (its coefficient stays 1).
  if (op == ReduceOp::kSum || op == ReduceOp::kAverage || op == ReduceOp::kAdasum) {
    std::memset(buf, 0, count * DataTypeSize(dtype));
    return;
  }
  auto pick = [&](auto lowest, auto highest, auto one) {
    using T = decltype(one);
    Fill<T>(buf, count, op == ReduceOp::kMin ? highest : op == ReduceOp::kMax ? lowest : one);
  };
  switch (dtype) {
    case DataType::kFloat32:
      pick(-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(), 1.0f);
      break;
    case DataType::kFloat64:
      pick(-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(), 1.0);
      break;
    case DataType::kFloat16:  // -inf, +inf, 1.0 in binary16
      pick(uint16_t{0xFC00}, uint16_t{0x7C00}, uint16_t{0x3C00});
      break;
    case DataType::kBFloat16:
      pick(uint16_t{0xFF80}, uint16_t{0x7F80}, uint16_t{0x3F80});
      break;
    case DataType::kInt8:
      pick(int8_t{-128}, int8_t{127}, int8_t{1});
      break;
    case DataType::kUInt8:
      pick(uint8_t{0}, uint8_t{255}, uint8_t{1});
      break;
    case DataType::kInt32:
      pick(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), int32_t{1});
      break;
    case DataType::kInt64:
      pick(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), int64_t{1});
      break;
    case DataType::kInt16:
      pick(std::numeric_limits<int16_t>::min(), std::numeric_limits<int16_t>::max(), int16_t{1});
      break;
    case DataType::kBool:  // max is or: false; min and product are and: true (sum: false, above)
      pick(uint8_t{0}, uint8_t{1}, uint8_t{1});
      break;
  }
}

// The reduction the collective runs, and the factor applied afterwards.
ReduceOp WireOp(ReduceOp op) {
  return op == ReduceOp::kAverage ? ReduceOp::kSum : op;
}
double PostFactor(const Response& r, int contributors) {
  double f = r.postscale;
  if (r.reduce_op == ReduceOp::kAverage) f /= std::max(1, contributors);
  return f;
}

std::string TimelineArgs(const char* algorithm, size_t bytes, size_t fused) {
  return std::string("{\"algorithm\":\"") + algorithm + "\",\"bytes\":" + std::to_string(bytes) +
         ",\"fused_tensors\":" + std::to_string(fused) + "}";
}

}  // namespace

Executor::Executor(fusion::FusionLimits fusion, timeline::Timeline* timeline)
    : fusion_(fusion), timeline_(timeline) {}

Status Executor::Execute(const collectives::Comm& comm, const std::vector<Response>& responses,
                         int contributors, const Lookup& lookup, const Finish& finish) {
  // Error responses fail the key here; nothing runs for them.
  for (const Response& r : responses) {
    if (!r.ok() && lookup(r.key) != nullptr) finish(r.key, Aborted(r.error));
  }
  // An operation completes when its last tensor has run (a group may span batches).
  std::map<std::string, size_t> remaining;
  for (const Response& r : responses) {
    if (!r.ok()) continue;
    remaining[r.key] = std::max<size_t>(1, r.tensors.size());
    internal::Operation* op = lookup(r.key);
    const bool owns_output = r.type == OpType::kAllgather || r.type == OpType::kAlltoall ||
                             r.type == OpType::kReducescatter ||
                             (r.type == OpType::kBroadcast && r.sized_by_root);
    if (op != nullptr && owns_output && op->results.size() < r.tensors.size()) {
      op->results.resize(r.tensors.size());
    }
  }
  if (timeline_) {
    for (const Response& r : responses) {
      for (const TensorSpec& t : r.tensors) timeline_->ActivityStart(t.name, "QUEUE");
    }
  }

  for (const fusion::Batch& batch : fusion::PlanBatches(responses, fusion_)) {
    const Response& head = responses[batch.items[0].response];
    const int n = head.contributors > 0 ? head.contributors : contributors;
    Status s;
    if (head.type == OpType::kAllreduce) {
      std::vector<BatchRef> refs;
      for (const auto& it : batch.items) {
        const Response& r = responses[it.response];
        refs.push_back({&r, it.tensor, lookup(r.key)});
      }
      s = head.reduce_op == ReduceOp::kAdasum ? RunAdasum(comm, refs[0], n)
                                              : RunAllreduceBatch(comm, refs, n);
      allreduce_collectives_.fetch_add(1);
    } else {
      s = RunOther(comm, head, batch.items[0].tensor, lookup(head.key), n);
    }
    if (!s.ok()) return s;  // the transport is broken: the caller fails everything
    for (const auto& it : batch.items) {
      const Response& r = responses[it.response];
      if (--remaining[r.key] == 0 && lookup(r.key) != nullptr) finish(r.key, Status::OK());
    }
  }
  return Status::OK();
}

// Fusion layout: the buffer is part-major. Each tensor is cut by AllreduceLayout(its count) into
// the allreduce's parts, and part s of the buffer holds piece s of every tensor, in batch order.
// An element thus sits in the same part (and is reduced in the same order) whether its tensor runs
// alone or fused, which makes fused and unfused results bit-identical.
Status Executor::RunAllreduceBatch(const collectives::Comm& comm,
                                   const std::vector<BatchRef>& items, int contributors) {
  const Response& head = *items[0].response;
  const DataType dtype = head.tensors[items[0].tensor].dtype;
  const size_t esize = DataTypeSize(dtype);
  const bool fused = items.size() > 1;

  // Piece boundaries of each tensor, and the part boundaries of the whole buffer.
  std::vector<std::vector<size_t>> pieces(items.size());
  int n = 1;
  std::vector<size_t> segments;
  for (size_t i = 0; i < items.size(); ++i) {
    const TensorSpec& spec = items[i].response->tensors[items[i].tensor];
    pieces[i] = collectives::AllreduceLayout(comm, static_cast<size_t>(spec.num_elements()));
    if (i == 0) {
      n = static_cast<int>(pieces[0].size()) - 1;
      segments.assign(n + 1, 0);
    }
    for (int s = 0; s < n; ++s) segments[s + 1] += pieces[i][s + 1] - pieces[i][s];
  }
  for (int s = 0; s < n; ++s) segments[s + 1] += segments[s];
  const size_t count = segments[n];
  const size_t total = count * esize;

  // Where piece s of tensor i lives in the buffer (element offset).
  auto for_each_piece = [&](auto&& fn) {
    std::vector<size_t> cursor(segments.begin(), segments.end() - 1);
    for (size_t i = 0; i < items.size(); ++i) {
      for (int s = 0; s < n; ++s) {
        const size_t len = pieces[i][s + 1] - pieces[i][s];
        fn(i, pieces[i][s] * esize, cursor[s] * esize, len * esize);
        cursor[s] += len;
      }
    }
  };

  char* buf;
  const bool in_place = !fused && items[0].op != nullptr;
  if (in_place) {
    // Alone, a tensor's pieces are already in ring order: reduce in the caller's output buffer.
    const Tensor& in = items[0].op->inputs[items[0].tensor];
    const Tensor& out = items[0].op->outputs[items[0].tensor];
    buf = static_cast<char*>(out.data);
    if (in.data != out.data && total > 0) std::memcpy(buf, in.data, total);
  } else {
    std::vector<char>& storage = fused ? fusion_buffer_ : scratch_;
    if (storage.size() < total) storage.resize(total);
    buf = storage.data();
    if (timeline_) {
      for (const BatchRef& b : items) {
        timeline_->ActivityStart(b.response->tensors[b.tensor].name, "MEMCPY_IN_FUSION_BUFFER");
      }
    }
    for_each_piece([&](size_t i, size_t from, size_t to, size_t bytes) {
      if (bytes == 0) return;
      const BatchRef& b = items[i];
      if (b.op != nullptr) {
        std::memcpy(buf + to, static_cast<const char*>(b.op->inputs[b.tensor].data) + from, bytes);
        // Prescale real contributions only: a joined rank's identity must stay the identity
        // (1 for a product, +inf for a min whatever the sign of the scale).
        if (head.prescale != 1.0) {
          collectives::Scale(buf + to, bytes / esize, dtype, head.prescale);
        }
      } else {
        FillIdentity(buf + to, bytes / esize, dtype, head.reduce_op);
      }
    });
  }

  if (timeline_) {
    const std::string args =
        TimelineArgs(collectives::AllreduceAlgorithm(comm, total), total, items.size());
    for (const BatchRef& b : items) {
      timeline_->ActivityStart(b.response->tensors[b.tensor].name, "ALLREDUCE", args);
    }
  }
  if (in_place && head.prescale != 1.0) collectives::Scale(buf, count, dtype, head.prescale);
  Status s = collectives::AllreduceParts(comm, buf, segments, dtype, WireOp(head.reduce_op),
                                         PostFactor(head, contributors));
  if (!s.ok()) return s.WithContext("allreduce of '" + head.key + "'");

  if (!in_place) {
    if (timeline_) {
      for (const BatchRef& b : items) {
        timeline_->ActivityStart(b.response->tensors[b.tensor].name, "MEMCPY_OUT_FUSION_BUFFER");
      }
    }
    for_each_piece([&](size_t i, size_t to, size_t from, size_t bytes) {
      const BatchRef& b = items[i];
      if (bytes == 0 || b.op == nullptr) return;
      std::memcpy(static_cast<char*>(b.op->outputs[b.tensor].data) + to, buf + from, bytes);
    });
  }
  return Status::OK();
}

// Adasum is never fused (the planner keeps it alone): each tensor is combined on its own, as
// Horovod combines per layer.
Status Executor::RunAdasum(const collectives::Comm& comm, const BatchRef& item, int contributors) {
  const Response& r = *item.response;
  const TensorSpec& spec = r.tensors[item.tensor];
  const size_t count = static_cast<size_t>(spec.num_elements());
  const size_t bytes = count * DataTypeSize(spec.dtype);
  char* buf;
  if (item.op != nullptr) {
    const Tensor& in = item.op->inputs[item.tensor];
    const Tensor& out = item.op->outputs[item.tensor];
    buf = static_cast<char*>(out.data);
    if (in.data != out.data && bytes > 0) std::memcpy(buf, in.data, bytes);
    if (r.prescale != 1.0) collectives::Scale(buf, count, spec.dtype, r.prescale);
  } else {
    scratch_.resize(std::max(scratch_.size(), bytes));
    buf = scratch_.data();
    FillIdentity(buf, count, spec.dtype, ReduceOp::kAdasum);
  }
  if (timeline_) {
    timeline_->ActivityStart(spec.name, "ALLREDUCE", TimelineArgs("adasum", bytes, 1));
  }
  Status s = collectives::AdasumAllreduce(comm, buf, {count}, spec.dtype);
  if (!s.ok()) return s.WithContext("adasum allreduce of '" + spec.name + "'");
  if (item.op != nullptr && r.postscale != 1.0) {
    collectives::Scale(buf, count, spec.dtype, r.postscale);
  }
  return Status::OK();
}

Status Executor::RunReducescatter(const collectives::Comm& comm, const Response& r, size_t ti,
                                  internal::Operation* op, int contributors) {
  const int size = comm.size();
  const int rank = comm.rank();
  const TensorSpec& t = r.tensors[ti];
  const int64_t rows = t.shape[0];
  const size_t row_elems = static_cast<size_t>(t.num_elements() / std::max<int64_t>(rows, 1));
  const size_t count = static_cast<size_t>(t.num_elements());
  std::vector<size_t> counts(size);
  std::vector<int64_t> shares(size);
  for (int p = 0; p < size; ++p) {
    shares[p] = rows / size + (p < rows % size ? 1 : 0);
    counts[p] = static_cast<size_t>(shares[p]) * row_elems;
  }
  const size_t esize = DataTypeSize(t.dtype);
  scratch_.resize(std::max(scratch_.size(), count * esize));
  if (op != nullptr) {
    if (count > 0) std::memcpy(scratch_.data(), op->inputs[ti].data, count * esize);
  } else {
    FillIdentity(scratch_.data(), count, t.dtype, r.reduce_op);
  }
  // As for allreduce: a joined rank's identity is not prescaled.
  if (op != nullptr && r.prescale != 1.0) {
    collectives::Scale(scratch_.data(), count, t.dtype, r.prescale);
  }
  std::vector<char> discard;
  char* out;
  if (op != nullptr) {
    internal::Operation::Result& res = op->results[ti];
    res.data.resize(counts[rank] * esize);
    res.shape = t.shape;
    res.shape[0] = shares[rank];
    res.splits = shares;
    out = res.data.data();
  } else {
    discard.resize(counts[rank] * esize);
    out = discard.data();
  }
  Status s =
      collectives::Reducescatter(comm, scratch_.data(), out, counts, t.dtype, WireOp(r.reduce_op));
  if (!s.ok()) return s.WithContext("reducescatter of '" + t.name + "'");
  const double post = PostFactor(r, contributors);
  if (post != 1.0) collectives::Scale(out, counts[rank], t.dtype, post);
  return Status::OK();
}

Status Executor::RunOther(const collectives::Comm& comm, const Response& r, size_t ti,
                          internal::Operation* op, int contributors) {
  const int size = comm.size();
  const int rank = comm.rank();
  if (timeline_ && ti < r.tensors.size()) {
    timeline_->ActivityStart(r.tensors[ti].name, fusion::OpTypeActivity(r.type));
  }
  switch (r.type) {
    case OpType::kBroadcast: {
      const size_t n = Bytes(r.tensors[0]);
      void* buf = nullptr;
      if (op != nullptr && r.sized_by_root && rank != r.root) {
        internal::Operation::Result& res = op->results[0];
        res.data.resize(n);
        res.shape = r.tensors[0].shape;
        buf = res.data.data();
      } else if (op != nullptr) {
        buf = op->outputs[0].data;
      }
      if (buf == nullptr) {
        scratch_.resize(std::max(scratch_.size(), n));
        buf = scratch_.data();
      }
      return collectives::Broadcast(comm, buf, n, r.root)
          .WithContext("broadcast of '" + r.key + "' from rank " +
                       std::to_string(comm.JobRank(r.root)));
    }
    case OpType::kAllgather: {
      const TensorSpec& t = r.tensors[ti];
      size_t row = DataTypeSize(t.dtype);
      for (size_t i = 1; i < t.shape.size(); ++i) row *= static_cast<size_t>(t.shape[i]);
      std::vector<size_t> bytes(size);
      std::vector<int64_t> splits(size);
      int64_t rows = 0;
      for (int p = 0; p < size; ++p) {
        splits[p] = r.first_dims[ti * size + p];
        bytes[p] = static_cast<size_t>(splits[p]) * row;
        rows += splits[p];
      }
      size_t total = static_cast<size_t>(rows) * row;
      std::vector<char> discard;
      char* out;
      const void* in = nullptr;
      if (op != nullptr) {
        internal::Operation::Result& res = op->results[ti];
        res.data.resize(total);
        res.shape = t.shape;
        res.shape[0] = rows;
        res.splits = std::move(splits);
        out = res.data.data();
        in = op->inputs[ti].data;
      } else {
        discard.resize(total);
        out = discard.data();
      }
      return collectives::Allgather(comm, in, out, bytes)
          .WithContext("allgather of '" + t.name + "'");
    }
    case OpType::kAlltoall: {
      const TensorSpec& t = r.tensors[0];
      size_t row = DataTypeSize(t.dtype);
      for (size_t i = 1; i < t.shape.size(); ++i) row *= static_cast<size_t>(t.shape[i]);
      std::vector<size_t> send(size), recv(size);
      int64_t rows = 0;
      internal::Operation::Result& res = op->results[0];
      res.splits.assign(size, 0);
      for (int p = 0; p < size; ++p) {
        send[p] = static_cast<size_t>(r.splits[rank * size + p]) * row;
        recv[p] = static_cast<size_t>(r.splits[p * size + rank]) * row;
        res.splits[p] = r.splits[p * size + rank];
        rows += r.splits[p * size + rank];
      }
      res.data.resize(static_cast<size_t>(rows) * row);
      res.shape = op->inputs[0].shape;
      res.shape[0] = rows;
      return collectives::Alltoall(comm, op->inputs[0].data, send, res.data.data(), recv)
          .WithContext("alltoall of '" + r.key + "'");
    }
    case OpType::kReducescatter:
      return RunReducescatter(comm, r, ti, op, contributors);
    case OpType::kJoin:
      if (op != nullptr) op->last_joined_rank = r.last_joined_rank;
      return Status::OK();
    case OpType::kBarrier:
      // Negotiation already proved every rank reached the barrier.
      return Status::OK();
    case OpType::kAllreduce:
    case OpType::kAddProcessSet:
    case OpType::kRemoveProcessSet:
      break;
  }
  return Internal("executor: unexpected response type for '" + r.key + "'");
}

}  // namespace hvd::runtime::core
