#include "gpu/cuda/nccl_comm.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>
#include <thread>

#include "gpu/cuda/cuda_check.h"

namespace hvd::runtime::gpu::cuda {

#ifdef HVD_HAVE_NCCL_H
namespace {

// hvd's element types as NCCL's. int16 has none: Unimplemented, so that the caller can take the
// host path for that tensor.
Status ToNccl(DataType dtype, ncclDataType_t* out) {
  switch (dtype) {
    case DataType::kFloat32:
      *out = ncclFloat32;
      return Status::OK();
    case DataType::kFloat64:
      *out = ncclFloat64;
      return Status::OK();
    case DataType::kFloat16:
      *out = ncclFloat16;
      return Status::OK();
    case DataType::kBFloat16:
      *out = ncclBfloat16;
      return Status::OK();
    case DataType::kInt8:
      *out = ncclInt8;
      return Status::OK();
    case DataType::kUInt8:
      *out = ncclUint8;
      return Status::OK();
    case DataType::kInt32:
      *out = ncclInt32;
      return Status::OK();
    case DataType::kInt64:
      *out = ncclInt64;
      return Status::OK();
    case DataType::kBool:
      *out = ncclUint8;
      return Status::OK();
    case DataType::kInt16:
      break;
  }
  return Unimplemented("NCCL has no " + std::string(DataTypeName(dtype)) +
                       " type: reduce this tensor through the host");
}

// bool bytes are 0 or non-zero: sum (logical or) is max, product (logical and) is min; the
// result bytes keep the inputs' truth, not necessarily 0/1 (PyTorch's bools are 0/1 already).
Status ToNccl(ReduceOp op, DataType dtype, ncclRedOp_t* out) {
  const bool is_bool = dtype == DataType::kBool;
  switch (op) {
    case ReduceOp::kSum:
      *out = is_bool ? ncclMax : ncclSum;
      return Status::OK();
    case ReduceOp::kProduct:
      *out = is_bool ? ncclMin : ncclProd;
      return Status::OK();
    case ReduceOp::kMin:
      *out = ncclMin;
      return Status::OK();
    case ReduceOp::kMax:
      *out = ncclMax;
      return Status::OK();
    case ReduceOp::kAverage:
      return InvalidArgument("NCCL: average is a sum and a postscale; pass kSum");
    case ReduceOp::kAdasum:
      break;
  }
  return Unimplemented("NCCL has no " + std::string(ReduceOpName(op)) + " reduction");
}

class Comm final : public NcclComm {
 public:
  Comm(const NcclApi* api, ncclComm_t comm, int rank, int size, int device)
      : api_(api), comm_(comm), rank_(rank), size_(size), device_(device) {}

  ~Comm() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    // At process exit the CUDA runtime may be unloading already (its atexit handler ran before
    // hvd's shutdown): the driver reclaims everything then, and NCCL must not be called.
    ScopedDevice keep(device_);
    if (keep.error() == cudaErrorCudartUnloading) return;
    // Finalize flushes this rank's pending work; it may need peers, so it is bounded, and a
    // communicator that does not finish in time is aborted instead of hanging the process exit.
    ncclResult_t r = api_->CommFinalize(comm_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (r == ncclSuccess || r == ncclInProgress) {
      ncclResult_t state = ncclSuccess;
      if (api_->CommGetAsyncError(comm_, &state) != ncclSuccess) break;
      if (state != ncclInProgress) {
        r = state;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (r == ncclSuccess) {
      api_->CommDestroy(comm_);
    } else {
      api_->CommAbort(comm_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status Allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                   void* stream) override {
    ncclDataType_t t;
    ncclRedOp_t o;
    HVD_RETURN_IF_ERROR(ToNccl(dtype, &t));
    HVD_RETURN_IF_ERROR(ToNccl(op, dtype, &o));
    return Call(
        "ncclAllReduce (" + Describe(count, dtype) + ", " + std::string(ReduceOpName(op)) + ")",
        [&] { return api_->AllReduce(send, recv, count, t, o, comm_, S(stream)); });
  }

  Status Broadcast(void* buf, size_t bytes, int root, void* stream) override {
    if (root < 0 || root >= size_) {
      return InvalidArgument("ncclBroadcast: root " + std::to_string(root) + " outside [0, " +
                             std::to_string(size_) + ")");
    }
    return Call(
        "ncclBroadcast (" + std::to_string(bytes) + " bytes from rank " + std::to_string(root) +
            ")",
        [&] { return api_->Broadcast(buf, buf, bytes, ncclUint8, root, comm_, S(stream)); });
  }

  Status Allgather(const void* send, void* recv, size_t send_bytes, void* stream) override {
    return Call("ncclAllGather (" + std::to_string(send_bytes) + " bytes per rank)", [&] {
      return api_->AllGather(send, recv, send_bytes, ncclUint8, comm_, S(stream));
    });
  }

  Status Reducescatter(const void* send, void* recv, size_t recv_count, DataType dtype, ReduceOp op,
                       void* stream) override {
    ncclDataType_t t;
    ncclRedOp_t o;
    HVD_RETURN_IF_ERROR(ToNccl(dtype, &t));
    HVD_RETURN_IF_ERROR(ToNccl(op, dtype, &o));
    return Call(
        "ncclReduceScatter (" + Describe(recv_count, dtype) + " per rank, " +
            std::string(ReduceOpName(op)) + ")",
        [&] { return api_->ReduceScatter(send, recv, recv_count, t, o, comm_, S(stream)); });
  }

  Status Alltoall(const void* send, const size_t* send_bytes, const size_t* send_offsets,
                  void* recv, const size_t* recv_bytes, const size_t* recv_offsets,
                  void* stream) override {
    if (send_bytes[rank_] != recv_bytes[rank_]) {
      return InvalidArgument("alltoall: rank " + std::to_string(rank_) + " sends itself " +
                             std::to_string(send_bytes[rank_]) + " bytes but expects " +
                             std::to_string(recv_bytes[rank_]));
    }
    const char* s = static_cast<const char*>(send);
    char* r = static_cast<char*>(recv);
    // This rank's own block is a device copy on the same stream, not a send to itself.
    if (send_bytes[rank_] > 0) {
      HVD_RETURN_IF_ERROR(SetDevice());
      HVD_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(r + recv_offsets[rank_], s + send_offsets[rank_], send_bytes[rank_],
                          cudaMemcpyDeviceToDevice, S(stream)),
          "cudaMemcpyAsync (alltoall, own block)");
    }
    if (size_ == 1) return Status::OK();
    return Call("ncclGroupStart/ncclSend/ncclRecv/ncclGroupEnd (alltoall)", [&] {
      ncclResult_t res = api_->GroupStart();
      for (int p = 0; p < size_ && res == ncclSuccess; ++p) {
        if (p == rank_) continue;
        if (send_bytes[p] > 0) {
          res = api_->Send(s + send_offsets[p], send_bytes[p], ncclUint8, p, comm_, S(stream));
        }
        if (res == ncclSuccess && recv_bytes[p] > 0) {
          res = api_->Recv(r + recv_offsets[p], recv_bytes[p], ncclUint8, p, comm_, S(stream));
        }
      }
      // Always closed, even after a failed enqueue: an open group would swallow the next call.
      const ncclResult_t end = api_->GroupEnd();
      return res != ncclSuccess ? res : end;
    });
  }

  Status AsyncError() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return Aborted("the NCCL communicator was aborted");
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = api_->CommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) return NcclError(*api_, r, "ncclCommGetAsyncError");
    if (state != ncclSuccess && state != ncclInProgress) {
      return NcclError(*api_, state,
                       "NCCL communicator (rank " + std::to_string(rank_) + " of " +
                           std::to_string(size_) + ")");
    }
    return Status::OK();
  }

  void Abort() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    ScopedDevice keep(device_);
    if (keep.error() == cudaErrorCudartUnloading) return;
    api_->CommAbort(comm_);
  }

 private:
  static cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

  static std::string Describe(size_t count, DataType dtype) {
    return std::to_string(count) + " " + std::string(DataTypeName(dtype));
  }

  Status SetDevice() {
    return CudaError(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")");
  }

  // Runs one enqueue under the lock (so that Abort, from any thread, never frees the
  // communicator under a call) and, when NCCL answers ncclInProgress (a non-blocking
  // communicator still connecting to a peer), polls until the enqueue completed, releasing the
  // lock between polls so that Abort can end the wait.
  template <typename Fn>
  Status Call(const std::string& what, Fn&& fn) {
    HVD_RETURN_IF_ERROR(SetDevice());
    ncclResult_t r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_) return Aborted(what + ": the NCCL communicator was aborted");
      r = fn();
    }
    while (r == ncclInProgress) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_) return Aborted(what + ": the NCCL communicator was aborted");
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = api_->CommGetAsyncError(comm_, &state);
      r = q != ncclSuccess ? q : state;
    }
    if (r != ncclSuccess) return NcclError(*api_, r, what);
    return Status::OK();
  }

  const NcclApi* const api_;
  const ncclComm_t comm_;
  const int rank_;
  const int size_;
  const int device_;
  std::mutex mu_;
  bool aborted_ = false;  // guarded by mu_: comm_ is freed once set
};

}  // namespace

Status NcclInitComm(const NcclApi* api, const std::string& id, int rank, int size, int device,
                    std::chrono::milliseconds timeout, const std::function<Status()>& cancelled,
                    std::unique_ptr<NcclComm>* out) {
  const std::string what = "NCCL communicator init (rank " + std::to_string(rank) + " of " +
                           std::to_string(size) + ", device " + std::to_string(device) + ")";
  if (id.size() != sizeof(ncclUniqueId)) {
    return InvalidArgument(what + ": the unique id has " + std::to_string(id.size()) +
                           " bytes, not " + std::to_string(sizeof(ncclUniqueId)));
  }
  if (size < 1 || rank < 0 || rank >= size) {
    return InvalidArgument(what + ": rank outside [0, size)");
  }
  HVD_CUDA_RETURN_IF_ERROR(cudaSetDevice(device),
                           what + ": cudaSetDevice(" + std::to_string(device) + ")");
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), sizeof(uid));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // `cancelled` may consult the rendezvous store: asked every 10 ms, NCCL every millisecond.
  auto next_cancel_check = std::chrono::steady_clock::now();
  ncclResult_t r = api->CommInitRankConfig(&comm, size, uid, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm != nullptr) api->CommAbort(comm);
    return NcclError(*api, r, "ncclCommInitRankConfig: " + what);
  }
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = api->CommGetAsyncError(comm, &state);
    if (q != ncclSuccess) state = q;
    if (state == ncclSuccess) break;
    if (state != ncclInProgress) {
      Status s = NcclError(*api, state, "ncclCommInitRankConfig: " + what);
      api->CommAbort(comm);
      return s;
    }
    const auto now = std::chrono::steady_clock::now();
    if (cancelled && now >= next_cancel_check) {
      next_cancel_check = now + std::chrono::milliseconds(10);
      Status c = cancelled();
      if (!c.ok()) {
        api->CommAbort(comm);
        return c;
      }
    }
    if (now >= deadline) {
      api->CommAbort(comm);
      return DeadlineExceeded(what + ": not every rank joined within " +
                              std::to_string(timeout.count()) +
                              " ms (ncclCommInitRankConfig still in progress); aborted");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  *out = std::make_unique<Comm>(api, comm, rank, size, device);
  return Status::OK();
}

#else  // !HVD_HAVE_NCCL_H

Status NcclInitComm(const NcclApi* api, const std::string& id, int rank, int size, int device,
                    std::chrono::milliseconds timeout, const std::function<Status()>& cancelled,
                    std::unique_ptr<NcclComm>* out) {
  const NcclApi* unused = nullptr;
  return LoadNcclApi(&unused);  // says that this build has no nccl.h
}

#endif

}  // namespace hvd::runtime::gpu::cuda
