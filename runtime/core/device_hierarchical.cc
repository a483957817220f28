// Hierarchical allreduce of device tensors (HVD_HIERARCHICAL_ALLREDUCE=1 on every rank of a job
// spanning hosts with equal ranks per host): NCCL within each host, the CPU ring across hosts.
//
// Vocabulary (H hosts, L ranks per host, this rank's local rank l):
//   local comm - an NCCL communicator of this host's L ranks (SetState::local), formed right after
//                the set's own, its id exchanged under the host's key (set id -1 - host index).
//   cross comm - the CPU communicator of the H ranks with local rank l (Comm::hierarchy's cross
//                group: the same transport the host allreduce's hierarchy uses).
//   share      - 1/L of the (padded) fusion buffer: share l is this rank's.
// Steps, on the fusion buffer (count elements, a multiple of L):
//   1. NCCL reducescatter over the local comm: share l reduced over the host, in place;
//   2. share l copied to host memory, allreduced over the cross comm, copied back;
//   3. NCCL allgather over the local comm, in place: every share on every rank.
// Each rank moves 1/L of the buffer across hosts, and the L ranks of a host do it at once (as
// Horovod's NCCL hierarchical allreduce, which uses MPI where this uses hvd's ring).
#include "core/device_executor.h"

#include "base/logging.h"
#include "gpu/nccl_bootstrap.h"

namespace hvd::runtime::core {

Status DeviceExecutor::FormLocal(const collectives::Comm& comm, SetState* st,
                                 const std::function<Status()>& cancelled) {
  const collectives::Hierarchy& h = *comm.hierarchy;
  const int host = h.cross->rank();  // this host's index among the job's hosts
  gpu::NcclIdExchange x;
  x.set_id = -1 - host;
  x.generation = st->generation;
  x.rank = h.local->rank();
  x.size = h.local->size();
  x.timeout = options_.nccl_timeout;
  // The host's ranks in local rank order (the global set's ranks are the job's).
  for (int r = 0; r < static_cast<int>(options_.hosts.size()); ++r) {
    if (options_.hosts[r] == options_.hosts[comm.rank()]) x.job_ranks.push_back(r);
  }
  if (x.job_ranks.size() != static_cast<size_t>(x.size)) x.job_ranks.clear();
  const std::string what =
      "the NCCL communicator of host " + std::to_string(host) + "'s ranks (hierarchical allreduce)";
  HVD_RETURN_IF_ERROR(FormComm(x, st->device, cancelled, what, &st->local));
  st->hierarchy = comm.hierarchy;
  st->cross = comm.OverCross();
  if (comm.rank() == 0) {
    HVD_LOG(INFO) << "GPU allreduces are hierarchical: NCCL within each host (" << x.size
                  << " ranks), hvd's ring across " << h.cross->size() << " hosts";
  }
  return Status::OK();
}

size_t DeviceExecutor::LocalCount(const SetState& st, size_t count, size_t esize) {
  if (!st.local) return count;
  const size_t n = static_cast<size_t>(st.local->size());
  const size_t align = kAlign / esize;  // every element size divides kAlign
  size_t share = (count + n - 1) / n;
  share = (share + align - 1) / align * align;
  return share * n;
}

Status DeviceExecutor::Hierarchical(SetState* st, char* buf, size_t count, DataType dtype,
                                    ReduceOp op, const std::function<void(const char*)>& mark) {
  gpu::Device* d = st->dev;
  const size_t share = count / static_cast<size_t>(st->local->size());
  const size_t bytes = share * DataTypeSize(dtype);
  char* mine = buf + static_cast<size_t>(st->local->rank()) * bytes;
  mark("NCCL_REDUCESCATTER");
  HVD_RETURN_IF_ERROR(st->local->Reducescatter(buf, mine, share, dtype, op, d->stream()));
  // Waited for by polling first: a copy to pageable memory blocks in CUDA until the stream gets
  // there, and a peer that gave up would leave it blocked for good (WaitNccl sees the abort).
  HVD_RETURN_IF_ERROR(WaitNccl(st));
  if (st->host_chunk.size() < bytes) st->host_chunk.resize(bytes);
  mark("MEMCPY_IN_HOST_BUFFER");
  if (bytes > 0) HVD_RETURN_IF_ERROR(d->CopyToHost(st->host_chunk.data(), mine, bytes));
  HVD_RETURN_IF_ERROR(d->Synchronize());
  mark("CPU_ALLREDUCE");
  HVD_RETURN_IF_ERROR(collectives::Allreduce(st->cross, st->host_chunk.data(), share, dtype, op)
                          .WithContext("across hosts"));
  mark("MEMCPY_OUT_HOST_BUFFER");
  // From pageable memory: the host buffer may be reused once the call returns.
  if (bytes > 0) HVD_RETURN_IF_ERROR(d->CopyToDevice(mine, st->host_chunk.data(), bytes));
  mark("NCCL_ALLGATHER");
  return st->local->Allgather(mine, buf, bytes, d->stream());
}

}  // namespace hvd::runtime::core
