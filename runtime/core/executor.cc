#include "core/executor.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "collectives/reduce.h"
#include "fusion/fusion_buffer.h"
#include "fusion/fusion_planner.h"

namespace hvd::runtime::core {

using negotiation::OpType;
using negotiation::Response;
using negotiation::TensorSpec;

namespace {

size_t Bytes(const TensorSpec& t) {
  return static_cast<size_t>(t.num_elements()) * DataTypeSize(t.dtype);
}

std::string TimelineArgs(const char* algorithm, size_t bytes, size_t fused) {
  return std::string("{\"algorithm\":\"") + algorithm + "\",\"bytes\":" + std::to_string(bytes) +
         ",\"fused_tensors\":" + std::to_string(fused) + "}";
}

}  // namespace

Executor::Executor(fusion::FusionLimits fusion, timeline::Timeline* timeline,
                   DeviceExecutorOptions gpu)
    : fusion_(fusion), timeline_(timeline), device_(std::move(gpu), timeline) {}

Status Executor::Execute(int set_id, const collectives::Comm& comm,
                         const std::vector<Response>& responses, int contributors,
                         const Lookup& lookup, const Finish& finish) {
  // Error responses fail the key here; nothing runs for them.
  for (const Response& r : responses) {
    if (!r.ok() && lookup(r.key) != nullptr) finish(r.key, Aborted(r.error));
  }
  // An operation completes when its last tensor has run (a group may span batches). By response:
  // each response is one operation's, looked up once here (a lookup compares names).
  std::vector<size_t>& remaining = remaining_;
  remaining.assign(responses.size(), 0);
  ops_.assign(responses.size(), nullptr);
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& r = responses[i];
    if (!r.ok()) continue;
    remaining[i] = std::max<size_t>(1, r.tensors.size());
    internal::Operation* op = ops_[i] = lookup(r.key);
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

  fusion::PlanBatches(responses, fusion_, &batches_);
  for (const fusion::Batch& batch : batches_) {
    const Response& head = responses[batch.items[0].response];
    const int n = head.contributors > 0 ? head.contributors : contributors;
    Status s;
    if (head.type == OpType::kAllreduce) {
      std::vector<BatchRef>& refs = refs_;
      refs.clear();
      for (const auto& it : batch.items) {
        refs.push_back({&responses[it.response], it.tensor, ops_[it.response], it.in_place});
      }
      bool on_host = false;  // the host path counts its own collectives (one batch may run several)
      auto host = [&](const collectives::Comm& c, const std::vector<BatchRef>& items) {
        on_host = true;
        return head.reduce_op == ReduceOp::kAdasum ? RunAdasum(c, items[0], n)
                                                   : RunAllreduceBatch(c, items, n);
      };
      s = head.gpu ? device_.Allreduce(set_id, comm, refs, n, host) : host(comm, refs);
      if (!on_host) allreduce_collectives_.fetch_add(1);
    } else {
      const size_t t = batch.items[0].tensor;
      internal::Operation* op = ops_[batch.items[0].response];
      auto host = [&](const collectives::Comm& c) { return RunOther(c, head, t, op, n); };
      s = head.gpu ? device_.Other(set_id, comm, head, t, op, n, host) : host(comm);
    }
    if (!s.ok()) {
      // The transport (or a GPU) is broken: the caller fails everything. NCCL work queued on
      // other ranks must fail too rather than hang.
      if (head.gpu) {
        device_.PublishAbort(s.message());
        device_.Abort();
      }
      return s;
    }
    for (const auto& it : batch.items) {
      const Response& r = responses[it.response];
      if (--remaining[it.response] == 0 && ops_[it.response] != nullptr) {
        finish(r.key, Status::OK());
      }
    }
  }
  return Status::OK();
}

// A tensor alone whose rank has its memory: its pieces are already in ring order, so it reduces
// in its caller's output buffer, reading its input as the collective goes (a prescale needs a
// scaled copy first). Its layout is kept between operations (nothing allocated per operation).
Status Executor::RunAllreduceAlone(const collectives::Comm& comm, const BatchRef& item,
                                   int contributors) {
  const Response& head = *item.response;
  const TensorSpec& spec = head.tensors[item.tensor];
  const size_t count = static_cast<size_t>(spec.num_elements());
  const size_t total = count * DataTypeSize(spec.dtype);
  collectives::AllreduceLayout(comm, count, &parts_);

  char* buf = static_cast<char*>(item.op->outputs[item.tensor].data);
  const void* input = PrepareInPlace(item);
  const BatchRef items[] = {item};
  TimelineAllreduceStart(comm, items, total);
  allreduce_collectives_.fetch_add(1);
  Status s = collectives::AllreduceParts(comm, input, buf, parts_, spec.dtype,
                                         WireOp(head.reduce_op), PostFactor(head, contributors));
  return s.ok() ? s : s.WithContext("allreduce of '" + head.key + "'");
}

const void* Executor::PrepareInPlace(const BatchRef& item) {
  const Response& head = *item.response;
  const TensorSpec& spec = head.tensors[item.tensor];
  const size_t total = Bytes(spec);
  const Tensor& in = item.op->inputs[item.tensor];
  char* buf = static_cast<char*>(item.op->outputs[item.tensor].data);
  const void* input = nullptr;  // out of place without a prescale: the collective reads it
  if (in.data != buf && total > 0) {
    const char* i = static_cast<const char*>(in.data);
    const bool apart = i + total <= buf || buf + total <= i;
    if (head.prescale == 1.0 && apart) {
      input = in.data;
    } else {
      std::memmove(buf, in.data, total);  // overlapping buffers: reduce in the output
    }
  }
  if (head.prescale != 1.0 && total > 0) {
    collectives::Scale(buf, static_cast<size_t>(spec.num_elements()), spec.dtype, head.prescale);
  }
  return input;
}

// The fusion buffer's layout (part-major: fusion/fusion_buffer.h) makes fused and unfused results
// bit-identical.
Status Executor::RunAllreduceBatch(const collectives::Comm& comm,
                                   const std::vector<BatchRef>& items, int contributors) {
  if (items.size() == 1 && items[0].op != nullptr) {
    return RunAllreduceAlone(comm, items[0], contributors);
  }
  if (items.size() > 1 &&
      std::any_of(items.begin(), items.end(), [](const BatchRef& b) { return b.in_place; })) {
    size_t count = 0;
    for (const BatchRef& b : items) {
      count += static_cast<size_t>(b.response->tensors[b.tensor].num_elements());
    }
    const DataType dtype = items[0].response->tensors[items[0].tensor].dtype;
    if (collectives::ExtentsTake(comm, count, dtype)) {
      return RunAllreduceInPlace(comm, items, contributors);
    }
    // Elsewhere (one host's single copy, a direct path): the packed items fused,
    // then each in-place one alone, the same collectives on every rank.
    std::vector<BatchRef> packed, one(1);
    for (const BatchRef& b : items) {
      if (!b.in_place) packed.push_back(b);
    }
    if (!packed.empty()) HVD_RETURN_IF_ERROR(RunAllreduceBatch(comm, packed, contributors));
    for (const BatchRef& b : items) {
      if (!b.in_place) continue;
      one[0] = b;
      one[0].in_place = false;
      HVD_RETURN_IF_ERROR(RunAllreduceBatch(comm, one, contributors));
    }
    return Status::OK();
  }
  const Response& head = *items[0].response;
  const DataType dtype = head.tensors[items[0].tensor].dtype;
  const bool fused = items.size() > 1;

  std::vector<std::vector<size_t>> pieces;
  for (const BatchRef& b : items) {
    const TensorSpec& spec = b.response->tensors[b.tensor];
    pieces.push_back(collectives::AllreduceLayout(comm, static_cast<size_t>(spec.num_elements())));
  }
  const fusion::BufferLayout layout(std::move(pieces), DataTypeSize(dtype));
  const size_t total = layout.bytes();

  std::vector<char>& storage = fused ? fusion_buffer_ : scratch_;
  if (storage.size() < total) storage.resize(total);
  char* buf = storage.data();
  if (timeline_) {
    for (const BatchRef& b : items) {
      timeline_->ActivityStart(b.response->tensors[b.tensor].name, "MEMCPY_IN_FUSION_BUFFER");
    }
  }
  std::vector<const void*> inputs;
  for (const BatchRef& b : items) {
    inputs.push_back(b.op != nullptr ? b.op->inputs[b.tensor].data : nullptr);
  }
  layout.Pack(inputs, dtype, head.reduce_op, head.prescale, buf);

  TimelineAllreduceStart(comm, items, total);
  allreduce_collectives_.fetch_add(1);
  Status s = collectives::AllreduceParts(comm, nullptr, buf, layout.parts(), dtype,
                                         WireOp(head.reduce_op), PostFactor(head, contributors));
  if (!s.ok()) return s.WithContext("allreduce of '" + head.key + "'");

  if (timeline_) {
    for (const BatchRef& b : items) {
      timeline_->ActivityStart(b.response->tensors[b.tensor].name, "MEMCPY_OUT_FUSION_BUFFER");
    }
  }
  std::vector<void*> outputs;
  for (const BatchRef& b : items) {
    outputs.push_back(b.op != nullptr ? b.op->outputs[b.tensor].data : nullptr);
  }
  layout.Unpack(buf, outputs);
  return Status::OK();
}

template <typename Items>
void Executor::TimelineAllreduceStart(const collectives::Comm& comm, const Items& items,
                                      size_t total) {
  if (timeline_ == nullptr || !timeline_->recording()) return;  // (the arguments allocate)
  const std::string args =
      TimelineArgs(collectives::AllreduceAlgorithm(comm, total), total, std::size(items));
  for (const BatchRef& b : items) {
    timeline_->ActivityStart(b.response->tensors[b.tensor].name, "ALLREDUCE", args);
  }
}
// Also called from executor_in_place.cc, which does not see the definition.
template void Executor::TimelineAllreduceStart(const collectives::Comm& comm,
                                               const std::vector<BatchRef>& items, size_t total);

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
    fusion::FillIdentity(buf, count, spec.dtype, ReduceOp::kAdasum);
  }
  if (timeline_ != nullptr && timeline_->recording()) {
    timeline_->ActivityStart(spec.name, "ALLREDUCE", TimelineArgs("adasum", bytes, 1));
  }
  allreduce_collectives_.fetch_add(1);
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
    fusion::FillIdentity(scratch_.data(), count, t.dtype, r.reduce_op);
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
    timeline_->ActivityStart(r.tensors[ti].name, negotiation::OpTypeActivity(r.type));
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
      AllgatherBlocks b = BlocksOf(r, ti, size);
      const int64_t rows = b.rows;
      const size_t total = b.total;
      std::vector<char> discard;
      char* out;
      const void* in = nullptr;
      if (op != nullptr) {
        internal::Operation::Result& res = op->results[ti];
        res.data.resize(total);
        res.shape = t.shape;
        res.shape[0] = rows;
        res.splits = std::move(b.splits);
        out = res.data.data();
        in = op->inputs[ti].data;
      } else {
        discard.resize(total);
        out = discard.data();
      }
      return collectives::Allgather(comm, in, out, b.bytes)
          .WithContext("allgather of '" + t.name + "'");
    }
    case OpType::kAlltoall: {
      const size_t row = RowBytes(r.tensors[0]);
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
