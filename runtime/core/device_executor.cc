#include "core/device_executor.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>

#include "base/logging.h"
#include "base/rendezvous_keys.h"
#include "collectives/reduce.h"
#include "fusion/fusion_buffer.h"
#include "gpu/nccl_bootstrap.h"

namespace hvd::runtime::core {

using negotiation::OpType;
using negotiation::Response;
using negotiation::TensorSpec;

namespace {

// What each rank tells the others when a set decides its mode (fixed size: an allgather).
struct RankGpu {
  int32_t flags = 0;  // kHasDevice | kNcclLoaded | kWantsHierarchical
  int32_t device = -1;
  char bus_id[40] = {};
};
constexpr int32_t kHasDevice = 1;
constexpr int32_t kNcclLoaded = 2;
constexpr int32_t kWantsHierarchical = 4;

std::string RankName(const collectives::Comm& comm, int r) {
  return "rank " + std::to_string(comm.JobRank(r));
}

}  // namespace

DeviceExecutor::DeviceExecutor(DeviceExecutorOptions options, timeline::Timeline* timeline)
    : options_(std::move(options)), timeline_(timeline) {}

DeviceExecutor::~DeviceExecutor() = default;

void DeviceExecutor::Abort() {
  aborted_.store(true);
  base::MutexLock lock(&mu_);
  for (auto& [id, st] : sets_) AbortComms(st.get());
}

void DeviceExecutor::PublishAbort(const std::string& why) {
  if (options_.store == nullptr) return;
  std::vector<std::pair<int, uint64_t>> exchanges;
  {
    base::MutexLock lock(&mu_);
    for (auto& [id, st] : sets_) {
      if (st->nccl) exchanges.emplace_back(id, st->generation);
    }
  }
  for (const auto& [id, generation] : exchanges) {
    (void)gpu::AbortNcclExchange(*options_.store, id, generation, why);
  }
}

void DeviceExecutor::Forget(int set_id) {
  std::unique_ptr<SetState> gone;
  {
    base::MutexLock lock(&mu_);
    auto it = sets_.find(set_id);
    if (it == sets_.end()) return;
    gone = std::move(it->second);
    sets_.erase(it);
  }
  // Destroyed outside the lock: finalizing a communicator waits for its peers.
}

void DeviceExecutor::AbortComms(SetState* st) {
  if (st->nccl) st->nccl->Abort();
  if (st->local) st->local->Abort();
}

Status DeviceExecutor::FormComm(const gpu::NcclIdExchange& x, int device,
                                const std::function<Status()>& cancelled, const std::string& what,
                                std::unique_ptr<gpu::NcclComm>* out) {
  std::string id;
  HVD_RETURN_IF_ERROR(gpu::ExchangeNcclId(
                          *options_.store, x,
                          [this](std::string* made) { return backend_->NcclUniqueId(made); },
                          cancelled, &id)
                          .WithContext(what));
  Status s = backend_->NcclInit(id, x.rank, x.size, device, options_.nccl_timeout, cancelled, out);
  if (s.ok()) return s;
  std::vector<int> missing;
  std::string who;
  if (gpu::MissingNcclRanks(*options_.store, x, &missing).ok() && !missing.empty()) {
    who = "; " + gpu::DescribeMissingRanks(missing, x.job_ranks);
  }
  (void)gpu::AbortNcclExchange(*options_.store, x.set_id, x.generation, s.message());
  return s.WithContext(what + who);
}

DeviceExecutor::SetState* DeviceExecutor::Find(int set_id) {
  base::MutexLock lock(&mu_);
  auto it = sets_.find(set_id);
  return it == sets_.end() ? nullptr : it->second.get();
}

Status DeviceExecutor::Cancelled(int set_id, uint64_t generation) {
  if (aborted_.load()) return Aborted("hvd is shutting down");
  std::string why;
  if (options_.store != nullptr &&
      options_.store->Get(base::NcclAbortKey(set_id, generation), &why).ok()) {
    return Aborted("process set " + std::to_string(set_id) + ": a peer gave NCCL up: " + why);
  }
  return Status::OK();
}

Status DeviceExecutor::WaitNccl(SetState* st) {
  using Clock = std::chrono::steady_clock;
  auto next_peer_check = Clock::now() + std::chrono::milliseconds(200);
  for (uint64_t polls = 0;; ++polls) {
    bool done = false;
    const Status q = st->dev->Query(&done);
    Status async = st->nccl->AsyncError();  // after an abort too
    if (async.ok() && st->local) async = st->local->AsyncError();
    if (!async.ok()) {
      AbortComms(st);
      return async;
    }
    if (!q.ok()) return q;
    if (done) return Status::OK();
    if (aborted_.load()) {
      AbortComms(st);
      return Aborted("hvd is shutting down");
    }
    if (Clock::now() >= next_peer_check) {
      next_peer_check = Clock::now() + std::chrono::milliseconds(200);
      Status peer = Cancelled(st->set_id, st->generation);
      if (!peer.ok()) {
        AbortComms(st);
        return peer;
      }
    }
    // Spin briefly (a small allreduce finishes in microseconds), then yield the core.
    if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

Status DeviceExecutor::Prepare(int set_id, const collectives::Comm& comm, int device,
                               SetState** out) {
  if (aborted_.load()) return Aborted("hvd is shutting down: GPU collectives were aborted");
  if (SetState* st = Find(set_id)) {
    if (device >= 0 && st->device >= 0 && device != st->device &&
        st->mode == SetState::Mode::kNccl) {
      return InvalidArgument("process set " + std::to_string(set_id) +
                             " runs NCCL on CUDA device " + std::to_string(st->device) +
                             ", but a tensor is on device " + std::to_string(device) +
                             ": use one device per rank (torch.cuda.set_device(local_rank))");
    }
    *out = st;
    return Status::OK();
  }
  auto st = std::make_unique<SetState>();
  st->device = device;
  st->set_id = set_id;
  HVD_RETURN_IF_ERROR(Decide(set_id, comm, device, st.get()));
  *out = st.get();
  base::MutexLock lock(&mu_);
  sets_[set_id] = std::move(st);
  return Status::OK();
}

// Every member runs this at the same batch (the set's first on GPUs), so the allgather pairs up.
Status DeviceExecutor::Decide(int set_id, const collectives::Comm& comm, int device, SetState* st) {
  RankGpu mine;
  std::string nccl_why;
  if (device >= 0) {
    HVD_RETURN_IF_ERROR(gpu::LoadGpuBackend(&backend_));
    HVD_RETURN_IF_ERROR(backend_->GetDevice(device, &st->dev));
    mine.flags |= kHasDevice;
    mine.device = device;
    const std::string bus = st->dev->bus_id();
    std::strncpy(mine.bus_id, bus.c_str(), sizeof(mine.bus_id) - 1);
    Status nccl = options_.store == nullptr
                      ? FailedPrecondition("no rendezvous store to exchange NCCL ids through")
                      : backend_->LoadNccl();
    if (options_.hierarchical && comm.hierarchy != nullptr && set_id == 0) {
      mine.flags |= kWantsHierarchical;
    }
    if (nccl.ok()) {
      mine.flags |= kNcclLoaded;
    } else {
      nccl_why = nccl.message();
    }
  }
  const int size = comm.size();
  std::vector<RankGpu> all(size);
  std::vector<size_t> bytes(size, sizeof(RankGpu));
  HVD_RETURN_IF_ERROR(
      collectives::Allgather(comm, &mine, all.data(), bytes)
          .WithContext("agreeing on the GPU path of process set " + std::to_string(set_id)));

  std::string why;
  std::map<std::pair<std::string, std::string>, int> owner;  // (host, bus id) -> first rank
  for (int r = 0; r < size && why.empty(); ++r) {
    all[r].bus_id[sizeof(all[r].bus_id) - 1] = '\0';
    if (!(all[r].flags & kHasDevice)) {
      why = RankName(comm, r) + " has no GPU tensor in this set (it joined before its first one)";
    } else if (!(all[r].flags & kNcclLoaded)) {
      why = "NCCL is unavailable on " + RankName(comm, r) +
            (r == comm.rank() && !nccl_why.empty() ? " (" + nccl_why + ")" : "");
    } else {
      const int job_rank = comm.JobRank(r);
      const std::string host =
          job_rank < static_cast<int>(options_.hosts.size()) ? options_.hosts[job_rank] : "";
      auto [it, fresh] = owner.emplace(std::make_pair(host, std::string(all[r].bus_id)), r);
      if (!fresh) {
        why = RankName(comm, it->second) + " and " + RankName(comm, r) + " share the GPU " +
              all[r].bus_id + (host.empty() ? "" : " on " + host) +
              " (NCCL needs a GPU of its own for each rank; hvdrun --gpu-isolation or one rank "
              "per GPU gives it that)";
      }
    }
  }
  if (!why.empty()) {
    st->mode = SetState::Mode::kStaged;
    st->why = why;
    if (comm.rank() == 0) {
      HVD_LOG(WARNING) << "GPU tensors of process set " << set_id
                       << " go through host memory (slower than NCCL): " << why;
    }
    return Status::OK();
  }

  // NCCL: rank 0 of the set makes the unique id; everyone meets through the store.
  gpu::NcclIdExchange x;
  x.set_id = set_id;
  x.generation = generations_[set_id]++;
  x.rank = comm.rank();
  x.size = size;
  for (int r = 0; r < size; ++r) x.job_ranks.push_back(comm.JobRank(r));
  x.timeout = options_.nccl_timeout;
  st->generation = x.generation;
  // Checked every 10 ms while NCCL connects: the store only every 200 ms.
  auto last_store_check = std::chrono::steady_clock::now();
  auto cancelled = [&, this]() -> Status {
    if (aborted_.load()) return Aborted("hvd is shutting down");
    const auto now = std::chrono::steady_clock::now();
    if (now - last_store_check < std::chrono::milliseconds(200)) return Status::OK();
    last_store_check = now;
    return Cancelled(set_id, x.generation);
  };
  HVD_RETURN_IF_ERROR(FormComm(x, device, cancelled,
                               "NCCL communicator of process set " + std::to_string(set_id) +
                                   " on CUDA device " + std::to_string(device),
                               &st->nccl));
  st->mode = SetState::Mode::kNccl;
  if (comm.rank() == 0) {
    HVD_LOG(INFO) << "process set " << set_id << ": GPU collectives on NCCL "
                  << backend_->nccl_version() << " (" << size << " ranks)";
  }
  int want_hierarchical = 0;
  for (const RankGpu& r : all) want_hierarchical += (r.flags & kWantsHierarchical) ? 1 : 0;
  if (want_hierarchical == size) {
    Status local = FormLocal(comm, st, cancelled);
    if (!local.ok()) {
      // The ranks of other hosts may still be forming theirs: they watch the set's abort key.
      (void)gpu::AbortNcclExchange(*options_.store, set_id, x.generation, local.message());
      st->nccl->Abort();
    }
    return local;
  }
  if (want_hierarchical > 0 && comm.rank() == 0) {
    HVD_LOG(WARNING) << "GPU allreduces of process set " << set_id << " run on NCCL alone: only "
                     << want_hierarchical << " of " << size
                     << " ranks set HVD_HIERARCHICAL_ALLREDUCE=1 (set it on every rank)";
  }
  return Status::OK();
}

Status DeviceExecutor::Allreduce(int set_id, const collectives::Comm& comm,
                                 const std::vector<BatchRef>& items, int contributors,
                                 const HostAllreduce& host) {
  int device = -1;
  for (const BatchRef& b : items) {
    if (b.op != nullptr && device < 0) device = b.op->inputs[b.tensor].device;
  }
  SetState* st = nullptr;
  HVD_RETURN_IF_ERROR(Prepare(set_id, comm, device, &st));
  const Response& head = *items[0].response;
  const DataType dtype = head.tensors[items[0].tensor].dtype;
  // NCCL has no int16, and Adasum's pairwise combination runs on the host.
  if (st->mode == SetState::Mode::kNccl && dtype != DataType::kInt16 &&
      head.reduce_op != ReduceOp::kAdasum) {
    nccl_batches_.fetch_add(1);
    return NcclAllreduce(st, items, contributors);
  }
  std::vector<StagedTensor> mine;
  for (const BatchRef& b : items) {
    if (b.op != nullptr) mine.push_back({b.op, b.tensor});
  }
  return Staged(mine, [&] { return host(comm, items); });
}

Status DeviceExecutor::NcclAllreduce(SetState* st, const std::vector<BatchRef>& items,
                                     int contributors) {
  gpu::Device* d = st->dev;
  const Response& head = *items[0].response;
  const DataType dtype = head.tensors[items[0].tensor].dtype;
  const size_t esize = DataTypeSize(dtype);
  const bool fused = items.size() > 1;

  for (const BatchRef& b : items) {
    if (b.op != nullptr) HVD_RETURN_IF_ERROR(WaitReady(d, b.op));
  }
  auto mark = [&](const char* activity) {
    if (!timeline_) return;
    for (const BatchRef& b : items) {
      timeline_->ActivityStart(b.response->tensors[b.tensor].name, activity);
    }
  };

  std::vector<size_t> offsets, counts;
  size_t total = 0;  // elements, padding included
  for (const BatchRef& b : items) {
    const size_t n = static_cast<size_t>(b.response->tensors[b.tensor].num_elements());
    offsets.push_back(total);
    counts.push_back(n);
    total += fused ? (n * esize + kAlign - 1) / kAlign * kAlign / esize : n;
  }

  char* buf = nullptr;
  const void* send = nullptr;  // what NCCL reads: the buffer itself, or an unscaled input
  std::vector<std::vector<char>> identities;  // host memory the copies read until Synchronize
  // Hierarchical: always through the fusion buffer, padded to a share per local rank.
  const bool in_place = !fused && items[0].op != nullptr && st->local == nullptr;
  const size_t padded = LocalCount(*st, total, esize);
  if (in_place) {
    const Tensor& in = items[0].op->inputs[items[0].tensor];
    const Tensor& out = items[0].op->outputs[items[0].tensor];
    buf = static_cast<char*>(out.data);
    if (head.prescale == 1.0) {
      send = in.data;  // NCCL reads the input and writes the output: no copy first
    } else if (counts[0] > 0) {
      mark("MEMCPY_IN_FUSION_BUFFER");
      gpu::Segment seg{in.data, out.data, counts[0]};
      HVD_RETURN_IF_ERROR(d->BatchedCopy(&seg, 1, dtype, head.prescale));
    }
  } else {
    void* storage = nullptr;
    HVD_RETURN_IF_ERROR(d->Buffer(0, std::max<size_t>(padded * esize, 1), &storage));
    buf = static_cast<char*>(storage);
    mark("MEMCPY_IN_FUSION_BUFFER");
    std::vector<gpu::Segment> segs;
    for (size_t i = 0; i < items.size(); ++i) {
      char* dst = buf + offsets[i] * esize;
      if (items[i].op != nullptr) {
        segs.push_back({items[i].op->inputs[items[i].tensor].data, dst, counts[i]});
      } else if (counts[i] > 0) {
        // A joined rank contributes the op's identity (zeros for a sum), never prescaled.
        identities.emplace_back(counts[i] * esize);
        fusion::FillIdentity(identities.back().data(), counts[i], dtype, head.reduce_op);
        HVD_RETURN_IF_ERROR(d->CopyToDevice(dst, identities.back().data(), counts[i] * esize));
      }
    }
    if (!segs.empty()) {
      HVD_RETURN_IF_ERROR(d->BatchedCopy(segs.data(), segs.size(), dtype, head.prescale));
    }
  }

  Status s;
  if (st->local) {
    hierarchical_batches_.fetch_add(1);
    s = Hierarchical(st, buf, padded, dtype, WireOp(head.reduce_op), mark);
  } else {
    mark("NCCL_ALLREDUCE");
    s = st->nccl->Allreduce(send != nullptr ? send : buf, buf, total, dtype, WireOp(head.reduce_op),
                            d->stream());
  }
  if (!s.ok()) return s.WithContext("allreduce of '" + head.key + "'");

  const double post = PostFactor(head, contributors);
  std::vector<gpu::Segment> segs;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].op == nullptr || counts[i] == 0) continue;
    void* out = items[i].op->outputs[items[i].tensor].data;
    if (in_place && post == 1.0) continue;
    segs.push_back({buf + offsets[i] * esize, out, counts[i]});
  }
  if (!segs.empty()) {
    mark("MEMCPY_OUT_FUSION_BUFFER");
    HVD_RETURN_IF_ERROR(d->BatchedCopy(segs.data(), segs.size(), dtype, post));
  }
  return WaitNccl(st).WithContext("allreduce of '" + head.key + "'");
}

Status DeviceExecutor::Other(int set_id, const collectives::Comm& comm, const Response& r, size_t t,
                             internal::Operation* op, int contributors, const HostOther& host) {
  const int device = op != nullptr && !op->inputs.empty() ? op->inputs[0].device : -1;
  SetState* st = nullptr;
  HVD_RETURN_IF_ERROR(Prepare(set_id, comm, device, &st));
  if (st->mode == SetState::Mode::kNccl) {
    Status s;
    bool ran = true;
    switch (r.type) {
      case OpType::kBroadcast:
        ran = !r.sized_by_root;  // a byte broadcast sized by its root keeps host results
        if (ran) s = NcclBroadcast(st, r, op);
        break;
      case OpType::kAllgather:
        s = NcclAllgather(st, r, t, op);
        break;
      case OpType::kAlltoall:
        s = NcclAlltoall(st, r, op);
        break;
      case OpType::kReducescatter:
        ran = r.tensors[t].dtype != DataType::kInt16;  // NCCL has no int16
        if (ran) s = NcclReducescatter(st, r, t, op, contributors);
        break;
      default:
        ran = false;
    }
    if (ran) {
      nccl_batches_.fetch_add(1);
      return s;
    }
  }
  // RunOther reads tensor t alone (broadcast and alltoall have one).
  std::vector<StagedTensor> mine;
  if (op != nullptr && t < op->inputs.size()) mine.push_back({op, t});
  return Staged(mine, [&] { return host(comm); });
}

Status DeviceExecutor::WaitReady(gpu::Device* d, internal::Operation* op) {
  if (op->ready.empty()) {
    // Recorded at submission for every device operation; without it, order after the caller's
    // streams as they are now (a superset of the work before the submission).
    std::set<void*> streams;
    for (const Tensor& t : op->inputs) {
      if (streams.insert(t.stream).second) HVD_RETURN_IF_ERROR(d->WaitFor(t.stream));
    }
    return Status::OK();
  }
  for (internal::Operation::ReadyEvent& r : op->ready) {
    if (r.event == nullptr) continue;  // an earlier batch of this operation waited already
    void* event = r.event;
    r.event = nullptr;
    HVD_RETURN_IF_ERROR(r.device->WaitReady(event));
  }
  return Status::OK();
}

}  // namespace hvd::runtime::core
