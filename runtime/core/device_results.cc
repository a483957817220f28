// The GPU collectives on NCCL other than allreduce: an in-place broadcast, and the three whose
// results the runtime owns (allgather, alltoall, reducescatter), each result device memory of its
// own on the rank's device (Operation::Result::device_data), made in stream order on our stream.
//
// Vocabulary:
//   row    - one index of a tensor's first dimension: what splits and first_dims count.
//   block  - what one rank sends to or receives from another: rows x row bytes.
//   even   - every rank's block is the same size: NCCL's own allgather / reducescatter run; uneven
//            blocks go through grouped send/recv (allgather) or an allreduce of the whole tensor
//            whose slice each rank keeps (reducescatter), since NCCL's need equal blocks.
#include <algorithm>

#include "base/logging.h"
#include "collectives/reduce.h"
#include "core/device_executor.h"
#include "fusion/fusion_buffer.h"

namespace hvd::runtime::core {

using negotiation::Response;
using negotiation::TensorSpec;

namespace {

std::vector<size_t> Offsets(const std::vector<size_t>& sizes) {
  std::vector<size_t> at(sizes.size(), 0);
  for (size_t i = 1; i < sizes.size(); ++i) at[i] = at[i - 1] + sizes[i - 1];
  return at;
}

bool Even(const std::vector<size_t>& sizes) {
  return std::all_of(sizes.begin(), sizes.end(), [&](size_t b) { return b == sizes[0]; });
}

}  // namespace

Status DeviceExecutor::AllocateResult(gpu::Device* d, internal::Operation* op, size_t t,
                                      size_t bytes, void** out) {
  internal::Operation::Result& res = op->results[t];
  if (res.device_data != nullptr) {  // never expected: one batch per result
    res.device->Free(res.device_data, res.free_stream);
    res.device_data = nullptr;
  }
  const Status a = d->Allocate(bytes, out);
  if (!a.ok()) {
    // The device is full (PyTorch's cache holds most of it) or has no memory pools: the
    // collective still runs on NCCL, into the fusion buffer, and the result is copied to host
    // memory (FinishResult), as a staged one. One failed allocation must not fail the job.
    if (!warned_allocation_.exchange(true)) {
      HVD_LOG(WARNING) << "a result of " << bytes << " bytes could not be allocated on CUDA device "
                       << d->ordinal() << " (" << a.message()
                       << "); such results are returned in host memory";
    }
    res.data.assign(bytes, 0);
    return d->Buffer(0, std::max<size_t>(bytes, 1), out);
  }
  res.data.clear();
  res.device = d;
  res.device_data = *out;
  res.device_bytes = bytes;
  // Freed after the work the caller queues on the stream it submitted from (where it uses the
  // result); operations on device tensors always name it.
  res.free_stream = t < op->inputs.size() ? op->inputs[t].stream : nullptr;
  return Status::OK();
}

Status DeviceExecutor::FinishResult(SetState* st, internal::Operation* op, size_t t,
                                    const void* out, Status s) {
  if (s.ok()) s = WaitNccl(st);
  if (op == nullptr) return s;
  internal::Operation::Result& res = op->results[t];
  if (!s.ok()) {
    // Our stream may still write the result (NCCL aborted mid-way): free it after our stream.
    if (res.device_data != nullptr) res.free_stream = st->dev->stream();
    return s;
  }
  if (res.device_data == nullptr && !res.data.empty()) {
    HVD_RETURN_IF_ERROR(st->dev->CopyToHost(res.data.data(), out, res.data.size()));
    HVD_RETURN_IF_ERROR(st->dev->Synchronize());
  }
  return Status::OK();
}

Status DeviceExecutor::NcclBroadcast(SetState* st, const Response& r, internal::Operation* op) {
  gpu::Device* d = st->dev;
  const size_t n =
      static_cast<size_t>(r.tensors[0].num_elements()) * DataTypeSize(r.tensors[0].dtype);
  void* buf = nullptr;
  if (op != nullptr) {
    HVD_RETURN_IF_ERROR(WaitReady(d, op));
    buf = op->outputs[0].data;
  } else {
    HVD_RETURN_IF_ERROR(d->Buffer(1, std::max<size_t>(n, 1), &buf));
  }
  if (timeline_) timeline_->ActivityStart(r.tensors[0].name, "NCCL_BROADCAST");
  Status s = st->nccl->Broadcast(buf, n, r.root, d->stream());
  if (s.ok()) s = WaitNccl(st);
  return s.WithContext("broadcast of '" + r.key + "' from set rank " + std::to_string(r.root));
}

Status DeviceExecutor::NcclAllgather(SetState* st, const Response& r, size_t t,
                                     internal::Operation* op) {
  gpu::Device* d = st->dev;
  const int size = st->nccl->size();
  const int rank = st->nccl->rank();
  const TensorSpec& spec = r.tensors[t];
  const AllgatherBlocks b = BlocksOf(r, t, size);
  const std::vector<size_t>& bytes = b.bytes;
  const size_t total = b.total;
  void* out = nullptr;
  const void* in = nullptr;
  if (op != nullptr) {
    HVD_RETURN_IF_ERROR(WaitReady(d, op));
    HVD_RETURN_IF_ERROR(AllocateResult(d, op, t, total, &out));
    internal::Operation::Result& res = op->results[t];
    res.shape = spec.shape;
    res.shape[0] = b.rows;
    res.splits = b.splits;
    in = op->inputs[t].data;
  } else {
    HVD_RETURN_IF_ERROR(d->Buffer(1, std::max<size_t>(total, 1), &out));
  }
  if (timeline_) timeline_->ActivityStart(spec.name, "NCCL_ALLGATHER");
  Status s;
  if (Even(bytes)) {
    s = st->nccl->Allgather(in, out, bytes[0], d->stream());
  } else {
    // Every rank sends its block to every rank (itself included) and receives each rank's block
    // at its place in the result.
    const std::vector<size_t> send(size, bytes[rank]), zero(size, 0);
    const std::vector<size_t> at = Offsets(bytes);
    s = st->nccl->Alltoall(in, send.data(), zero.data(), out, bytes.data(), at.data(), d->stream());
  }
  return FinishResult(st, op, t, out, s).WithContext("allgather of '" + spec.name + "'");
}

Status DeviceExecutor::NcclAlltoall(SetState* st, const Response& r, internal::Operation* op) {
  if (op == nullptr) {
    return Internal("alltoall of '" + r.key + "' reached a rank without the operation");
  }
  gpu::Device* d = st->dev;
  const int size = st->nccl->size();
  const int rank = st->nccl->rank();
  const TensorSpec& spec = r.tensors[0];
  const size_t row = RowBytes(spec);
  std::vector<size_t> send(size), recv(size);
  std::vector<int64_t> got(size);
  int64_t rows = 0;
  for (int p = 0; p < size; ++p) {
    send[p] = static_cast<size_t>(r.splits[rank * size + p]) * row;
    got[p] = r.splits[p * size + rank];
    recv[p] = static_cast<size_t>(got[p]) * row;
    rows += got[p];
  }
  HVD_RETURN_IF_ERROR(WaitReady(d, op));
  void* out = nullptr;
  HVD_RETURN_IF_ERROR(AllocateResult(d, op, 0, static_cast<size_t>(rows) * row, &out));
  internal::Operation::Result& res = op->results[0];
  res.shape = op->inputs[0].shape;
  res.shape[0] = rows;
  res.splits = got;
  if (timeline_) timeline_->ActivityStart(spec.name, "NCCL_ALLTOALL");
  const std::vector<size_t> send_at = Offsets(send), recv_at = Offsets(recv);
  Status s = st->nccl->Alltoall(op->inputs[0].data, send.data(), send_at.data(), out, recv.data(),
                                recv_at.data(), d->stream());
  return FinishResult(st, op, 0, out, s).WithContext("alltoall of '" + r.key + "'");
}

Status DeviceExecutor::NcclReducescatter(SetState* st, const Response& r, size_t t,
                                         internal::Operation* op, int contributors) {
  gpu::Device* d = st->dev;
  const int size = st->nccl->size();
  const int rank = st->nccl->rank();
  const TensorSpec& spec = r.tensors[t];
  const size_t esize = DataTypeSize(spec.dtype);
  const int64_t rows = spec.shape[0];
  const size_t count = static_cast<size_t>(spec.num_elements());
  const size_t row_elems = count / static_cast<size_t>(std::max<int64_t>(rows, 1));
  std::vector<size_t> counts(size);
  std::vector<int64_t> shares(size);
  for (int p = 0; p < size; ++p) {
    shares[p] = rows / size + (p < rows % size ? 1 : 0);
    counts[p] = static_cast<size_t>(shares[p]) * row_elems;
  }
  const std::vector<size_t> at = Offsets(counts);

  // What NCCL reads: the input itself, or a prescaled copy, or (a joined rank) the identity.
  const void* send = nullptr;
  std::vector<char> identity;  // host memory the copy reads until WaitNccl
  void* scratch = nullptr;
  HVD_RETURN_IF_ERROR(d->Buffer(1, std::max<size_t>(count * esize, 1), &scratch));
  if (op != nullptr) {
    HVD_RETURN_IF_ERROR(WaitReady(d, op));
    send = op->inputs[t].data;
    if (r.prescale != 1.0 && count > 0) {
      if (timeline_) timeline_->ActivityStart(spec.name, "MEMCPY_IN_FUSION_BUFFER");
      gpu::Segment seg{send, scratch, count};
      HVD_RETURN_IF_ERROR(d->BatchedCopy(&seg, 1, spec.dtype, r.prescale));
      send = scratch;
    }
  } else {
    identity.resize(std::max<size_t>(count * esize, 1));
    fusion::FillIdentity(identity.data(), count, spec.dtype, r.reduce_op);
    if (count > 0) HVD_RETURN_IF_ERROR(d->CopyToDevice(scratch, identity.data(), count * esize));
    send = scratch;
  }

  void* out = nullptr;
  const size_t mine = counts[rank] * esize;
  if (op != nullptr) {
    HVD_RETURN_IF_ERROR(AllocateResult(d, op, t, mine, &out));
    internal::Operation::Result& res = op->results[t];
    res.shape = spec.shape;
    res.shape[0] = shares[rank];
    res.splits = shares;
  } else {
    HVD_RETURN_IF_ERROR(d->Buffer(0, std::max<size_t>(mine, 1), &out));
  }
  if (timeline_) timeline_->ActivityStart(spec.name, "NCCL_REDUCESCATTER");
  const double post = PostFactor(r, contributors);
  Status s;
  if (Even(counts)) {
    s = st->nccl->Reducescatter(send, out, counts[0], spec.dtype, WireOp(r.reduce_op), d->stream());
    if (s.ok() && post != 1.0 && mine > 0) {
      gpu::Segment seg{out, out, counts[rank]};
      s = d->BatchedCopy(&seg, 1, spec.dtype, post);
    }
  } else {
    // Uneven shares: reduce the whole tensor (in the scratch buffer) and keep this rank's slice.
    s = st->nccl->Allreduce(send, scratch, count, spec.dtype, WireOp(r.reduce_op), d->stream());
    if (s.ok() && mine > 0) {
      gpu::Segment seg{static_cast<char*>(scratch) + at[rank] * esize, out, counts[rank]};
      s = d->BatchedCopy(&seg, 1, spec.dtype, post);
    }
  }
  return FinishResult(st, op, t, out, s).WithContext("reducescatter of '" + spec.name + "'");
}

}  // namespace hvd::runtime::core
