// DeviceExecutor: runs the executor's batches whose tensors are in CUDA device memory
// (Response::gpu), over NCCL where every rank of the process set has a GPU of its own, else staged
// through host memory over the CPU collectives.
//
// Vocabulary:
//   mode     - per process set, decided once by every member together at the set's first GPU
//              batch (an allgather of each rank's NCCL availability and GPU bus id over the CPU
//              communicator, so every rank decides alike): kNccl, or kStaged with the reason.
//   staged   - device inputs copied to host buffers, the host collective run on them, results
//              copied back: slower, but a job never fails only because of its GPU layout (ranks
//              sharing a GPU, which NCCL refuses; NCCL missing on a host; int16, which NCCL lacks).
//   our stream - the device's runtime stream (gpu/gpu_backend.h): every copy, kernel and NCCL call
//              runs there after an event on the caller's stream; the operation completes after a
//              synchronization of that stream only, never of the device.
//
// Results the runtime owns (allgather, alltoall, reducescatter) are device memory of their own on
// NCCL, host memory when staged (and for a broadcast sized by its root): Handle::output_device.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "collectives/collectives.h"
#include "core/operation.h"
#include "gpu/gpu_backend.h"
#include "gpu/nccl_bootstrap.h"
#include "negotiation/message.h"
#include "rendezvous/store.h"
#include "timeline/timeline.h"

namespace hvd::runtime::core {

// One tensor of an allreduce batch: its response, its index there, and this rank's operation
// (null: this rank has joined and contributes the identity).
struct BatchRef {
  const negotiation::Response* response;
  size_t tensor;
  internal::Operation* op;
  bool in_place = false;  // a large host tensor, never packed (fusion/fusion_planner.h)
};

// The reduction an allreduce runs on the wire (an average is a sum), and the factor applied
// afterwards (the postscale, divided by the contributors for an average): the host and the GPU
// paths alike.
inline ReduceOp WireOp(ReduceOp op) {
  return op == ReduceOp::kAverage ? ReduceOp::kSum : op;
}
inline double PostFactor(const negotiation::Response& r, int contributors) {
  double f = r.postscale;
  if (r.reduce_op == ReduceOp::kAverage) f /= contributors > 1 ? contributors : 1;
  return f;
}

// One first-dimension row of `t` in bytes: allgather and alltoall move whole rows.
inline size_t RowBytes(const negotiation::TensorSpec& t) {
  size_t row = DataTypeSize(t.dtype);
  for (size_t i = 1; i < t.shape.size(); ++i) row *= static_cast<size_t>(t.shape[i]);
  return row;
}

// An allgather of tensor `t` of `r` over `size` ranks: the rows and bytes each rank gives, and
// the rows and bytes in all (the host and the GPU paths alike).
struct AllgatherBlocks {
  std::vector<int64_t> splits;
  std::vector<size_t> bytes;
  int64_t rows = 0;
  size_t total = 0;
};
inline AllgatherBlocks BlocksOf(const negotiation::Response& r, size_t t, int size) {
  AllgatherBlocks b;
  const size_t row = RowBytes(r.tensors[t]);
  for (int p = 0; p < size; ++p) {
    b.splits.push_back(r.first_dims[t * size + p]);
    b.bytes.push_back(static_cast<size_t>(b.splits.back()) * row);
    b.rows += b.splits.back();
    b.total += b.bytes.back();
  }
  return b;
}

struct DeviceExecutorOptions {
  // The job/attempt-scoped store the NCCL unique ids are exchanged through (not owned; null: NCCL
  // is never used and every GPU batch is staged).
  rendezvous::Store* store = nullptr;
  // Host name of each job rank (ranks on one host with the same GPU bus id share a GPU).
  std::vector<std::string> hosts;
  std::chrono::milliseconds nccl_timeout{60000};
  // Allreduces of a set whose communicator spans hosts (Comm::hierarchy) run NCCL within each
  // host and the CPU ring across hosts (GpuHierarchicalRequested), where every member asks for it.
  bool hierarchical = false;
};

class DeviceExecutor {
 public:
  // Runs a host batch: the executor's CPU path with the operations' (host) tensors.
  using HostAllreduce =
      std::function<Status(const collectives::Comm& comm, const std::vector<BatchRef>& items)>;
  using HostOther = std::function<Status(const collectives::Comm& comm)>;

  DeviceExecutor(DeviceExecutorOptions options, timeline::Timeline* timeline);
  DeviceExecutor(const DeviceExecutor&) = delete;
  DeviceExecutor& operator=(const DeviceExecutor&) = delete;
  ~DeviceExecutor();

  // A fused (or single) allreduce batch of set `set_id`; `host` runs it on staged host copies.
  Status Allreduce(int set_id, const collectives::Comm& comm, const std::vector<BatchRef>& items,
                   int contributors, const HostAllreduce& host);
  // Any other GPU response (its tensor `t`; `op` null on a joined rank): on NCCL where the set
  // has it (broadcast in place, allgather, alltoall, reducescatter), else staged through `host`.
  Status Other(int set_id, const collectives::Comm& comm, const negotiation::Response& r, size_t t,
               internal::Operation* op, int contributors, const HostOther& host);

  // Batches run on NCCL, and staged through host memory (EngineStats); readable from any thread.
  uint64_t nccl_batches() const { return nccl_batches_.load(); }
  uint64_t staged_batches() const { return staged_batches_.load(); }
  uint64_t hierarchical_batches() const { return hierarchical_batches_.load(); }

  // Any thread: NCCL communicators are aborted rather than left to hang (engine stop, a broken
  // transport), and every later GPU batch fails. A rank waiting in NCCL for a dead peer wakes.
  void Abort();
  // Background thread: tells the other members of every NCCL set that this rank gave up (the
  // abort key of the set's exchange), so that their waits end too, naming `why`.
  void PublishAbort(const std::string& why);
  // Background thread, on every member at the same point: the set was removed; its communicator
  // is finalized and freed.
  void Forget(int set_id);

 private:
  // Elements from one fused tensor to the next are padded to this many bytes (and so are the
  // hierarchical allreduce's shares): the pack kernel's vector loads stay aligned, and 64 is a
  // multiple of every element size.
  static constexpr size_t kAlign = 64;
  // A process set's GPU path, decided at its first GPU batch.
  struct SetState {
    enum class Mode { kNccl, kStaged };
    Mode mode = Mode::kStaged;
    std::string why;             // kStaged: the reason, for the one-time notice
    int device = -1;             // this rank's device for the set (-1: none yet)
    gpu::Device* dev = nullptr;  // owned by the backend
    std::unique_ptr<gpu::NcclComm> nccl;
    uint64_t generation = 0;  // of the NCCL exchange (its abort key)
    int set_id = 0;
    // Hierarchical allreduce (device_hierarchical.cc): this host's ranks on NCCL, and the CPU
    // communicator of this local rank's peers on the other hosts (its transport owned by
    // `hierarchy`). Null `local`: allreduces run on `nccl` alone.
    std::unique_ptr<gpu::NcclComm> local;
    std::shared_ptr<const collectives::Hierarchy> hierarchy;
    collectives::Comm cross;
    std::vector<char> host_chunk;  // this rank's share, on its way across hosts
  };
  Status Prepare(int set_id, const collectives::Comm& comm, int device, SetState** out);
  Status Decide(int set_id, const collectives::Comm& comm, int device, SetState* st);
  Status NcclAllreduce(SetState* st, const std::vector<BatchRef>& items, int contributors);
  // The collectives whose results the runtime owns, on NCCL (device_results.cc): each result is
  // device memory of its own (Operation::Result::device_data). `op` null: a joined rank, which
  // contributes nothing (allgather) or the identity (reducescatter) and keeps nothing.
  Status NcclAllgather(SetState* st, const negotiation::Response& r, size_t t,
                       internal::Operation* op);
  Status NcclAlltoall(SetState* st, const negotiation::Response& r, internal::Operation* op);
  Status NcclReducescatter(SetState* st, const negotiation::Response& r, size_t t,
                           internal::Operation* op, int contributors);
  Status NcclBroadcast(SetState* st, const negotiation::Response& r, internal::Operation* op);
  // Hierarchical allreduce (device_hierarchical.cc). FormLocal: every member, right after the
  // set's communicator formed: this host's communicator, through the store under the host's own
  // exchange (set id -1 - host index). Hierarchical: `buf` holds `count` elements, a multiple of
  // the local size (LocalCount), reduced with `op` on every rank of the set.
  Status FormLocal(const collectives::Comm& comm, SetState* st,
                   const std::function<Status()>& cancelled);
  // One communicator: the id through the store (x), ncclCommInitRank on `device`; on failure the
  // exchange's abort key is written and the error names `what` and the ranks that never arrived.
  Status FormComm(const gpu::NcclIdExchange& x, int device,
                  const std::function<Status()>& cancelled, const std::string& what,
                  std::unique_ptr<gpu::NcclComm>* out);
  static size_t LocalCount(const SetState& st, size_t count, size_t esize);
  Status Hierarchical(SetState* st, char* buf, size_t count, DataType dtype, ReduceOp op,
                      const std::function<void(const char*)>& mark);
  // Any thread: NCCL work of the set's communicators fails instead of hanging.
  static void AbortComms(SetState* st);
  // Where result `t` of `op` is written (its shape and splits set by the caller): device memory
  // of its own, or, when that cannot be allocated, the fusion buffer, copied to the result's host
  // memory by FinishResult.
  Status AllocateResult(gpu::Device* d, internal::Operation* op, size_t t, size_t bytes,
                        void** out);
  // After the collective `s` (OK: enqueued): waits for it; a result written to the fusion buffer
  // goes to host memory; a failed one is freed after our stream's work, not the caller's.
  Status FinishResult(SetState* st, internal::Operation* op, size_t t, const void* out, Status s);
  // Our stream on `d` waits for the caller's work before `op` was submitted (the events recorded
  // then; each once, however many batches the operation spans).
  Status WaitReady(gpu::Device* d, internal::Operation* op);
  // Waits for our stream without blocking in CUDA: NCCL waiting for a peer that died never
  // finishes, so between polls it checks NCCL's async error, Abort() and the peers' abort key.
  Status WaitNccl(SetState* st);
  // A non-OK status while the set's communicator forms (Abort(), a peer's abort key).
  Status Cancelled(int set_id, uint64_t generation);
  // One tensor of an operation: the staged path copies exactly the batch's tensors.
  struct StagedTensor {
    internal::Operation* op;
    size_t index;
  };
  // Runs `run` with each of `tensors` (device memory) replaced by a host copy; copies the outputs
  // back to the device, and restores the caller's pointers, whatever happens.
  Status Staged(const std::vector<StagedTensor>& tensors, const std::function<Status()>& run);
  SetState* Find(int set_id);

  const DeviceExecutorOptions options_;
  timeline::Timeline* timeline_;
  gpu::GpuBackend* backend_ = nullptr;
  std::atomic<bool> aborted_{false};
  std::atomic<uint64_t> nccl_batches_{0};
  std::atomic<uint64_t> staged_batches_{0};
  std::atomic<uint64_t> hierarchical_batches_{0};
  std::atomic<bool> warned_allocation_{false};
  // Written by the background thread only; the lock lets Abort() walk it from any thread.
  mutable base::Mutex mu_;
  std::map<int, std::unique_ptr<SetState>> sets_ HVD_GUARDED_BY(mu_);
  std::map<int, uint64_t> generations_;  // communicators created per set id
};

}  // namespace hvd::runtime::core
