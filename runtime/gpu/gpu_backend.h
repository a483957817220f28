// What the runtime needs from a GPU, behind an interface so that libhvd.so never links CUDA.
//
// The implementation lives in libhvd_cuda.so (runtime/gpu/cuda/), built with nvcc where the CUDA
// toolkit is present and loaded with dlopen the first time a tensor names a CUDA device
// (LoadGpuBackend). libhvd_cuda.so links the CUDA runtime; NCCL it loads itself, also with dlopen,
// at the first communicator. A host with no driver, no toolkit or no NCCL still loads libhvd.so
// and runs every host tensor; device tensors then fail (no CUDA) or go through host memory (no
// NCCL, or several ranks on one GPU), each with a message that says why.
//
// Vocabulary:
//   device     - a CUDA device ordinal, as the caller's process numbers it (CUDA_VISIBLE_DEVICES
//                applied).
//   our stream - the runtime's own non-blocking stream on a device; every copy, kernel and NCCL
//                call of the runtime runs there, ordered after the caller's stream with an event
//                (WaitFor), never with a device-wide synchronization.
//   segment    - one contiguous run of elements copied (and scaled) by the batched copy kernel.
//
// Every call is made from the runtime's background thread, except where a comment says otherwise.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "hvd/status.h"
#include "hvd/types.h"

namespace hvd::runtime::gpu {

// One run of `count` elements from `src` to `dst` (device memory), multiplied by the batch's
// scale factor on the way. src == dst is allowed (scaling in place).
struct Segment {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t count = 0;
};

// An NCCL communicator of one process set on one device. Every collective is enqueued on
// `stream` and returns without waiting for it.
class NcclComm {
 public:
  NcclComm() = default;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  virtual ~NcclComm() = default;  // ncclCommDestroy (ncclCommAbort if Abort was called)

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // `op` is kSum, kMin, kMax or kProduct (averages are a sum and a postscale).
  virtual Status Allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                           void* stream) = 0;
  virtual Status Broadcast(void* buf, size_t bytes, int root, void* stream) = 0;
  // recv holds size() x send_bytes, rank-major.
  virtual Status Allgather(const void* send, void* recv, size_t send_bytes, void* stream) = 0;
  // send holds size() x recv_count elements; rank r gets block r.
  virtual Status Reducescatter(const void* send, void* recv, size_t recv_count, DataType dtype,
                               ReduceOp op, void* stream) = 0;
  // Grouped ncclSend/ncclRecv: send_bytes[p] bytes from send + send_offsets[p] to rank p, and
  // recv_bytes[p] bytes from rank p to recv + recv_offsets[p] (size() entries each).
  virtual Status Alltoall(const void* send, const size_t* send_bytes, const size_t* send_offsets,
                          void* recv, const size_t* recv_bytes, const size_t* recv_offsets,
                          void* stream) = 0;

  // ncclCommGetAsyncError: OK, or the error NCCL recorded (a peer died, a network failure).
  virtual Status AsyncError() = 0;
  // ncclCommAbort: pending NCCL work on every rank of this communicator fails instead of hanging.
  // Thread-safe (may be called from any thread, once).
  virtual void Abort() = 0;
};

// One CUDA device used by this process.
class Device {
 public:
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  virtual ~Device() = default;

  virtual int ordinal() const = 0;
  // Our stream (a cudaStream_t), created non-blocking with the device.
  virtual void* stream() = 0;
  // "0000:3b:00.0": the PCI bus id, the same for every process that uses this GPU (NCCL refuses
  // two ranks of one communicator on one GPU; the runtime detects that from these ids first).
  virtual std::string bus_id() const = 0;

  // Our stream waits for everything enqueued so far on `caller_stream` (null: the legacy default
  // stream): an event recorded there and waited on here; the host does not block.
  virtual Status WaitFor(void* caller_stream) = 0;
  // Events that order our stream after exactly the caller's work before a submission (recording
  // at run time instead would also wait for whatever the caller queued meanwhile, e.g. the rest
  // of a backward pass, and lose the overlap of communication with computation).
  // RecordReady: any thread (the caller's, at submission; its current device is kept): an event
  // recorded on `caller_stream` now. WaitReady: our stream waits for it; the event goes back to
  // the device's pool. ReleaseReady: any thread; back to the pool unwaited (an operation that
  // failed before it ran).
  virtual Status RecordReady(void* caller_stream, void** event) = 0;
  virtual Status WaitReady(void* event) = 0;
  virtual void ReleaseReady(void* event) = 0;

  // Blocks the calling thread until our stream's work is done; errors name the failed call.
  virtual Status Synchronize() = 0;
  // Without blocking: *done is whether our stream's work so far has finished (cudaStreamQuery).
  // NCCL work waiting for a peer that died never finishes; the runtime polls this between checks
  // for an abort instead of blocking in Synchronize.
  virtual Status Query(bool* done) = 0;

  // Device memory of at least `bytes`, grown (never shrunk) on demand; valid until the next call
  // with the same slot or the device's destruction. Slot 0: the fusion buffer; 1: scratch.
  virtual Status Buffer(int slot, size_t bytes, void** out) = 0;

  // Device memory of its own for a result the caller keeps (an allgather's, an alltoall's or a
  // reducescatter's on NCCL): allocated in stream order on our stream from a memory pool of the
  // device's own (cudaMallocFromPoolAsync), so our stream may write it at once, and any stream may
  // use it once that work is done. At least one byte is allocated, so *out is never null on OK.
  // An error (out of memory, no memory pools) leaves the device usable.
  virtual Status Allocate(size_t bytes, void** out) = 0;
  // Any thread: gives `p` back after the work enqueued so far on `stream` (cudaFreeAsync there:
  // the caller's stream, where the result's users are; our stream after a failed operation).
  // Errors are ignored (a process exiting after CUDA's teardown).
  virtual void Free(void* p, void* stream) = 0;

  // Asynchronous on our stream. Host memory need not be pinned (it then copies synchronously with
  // respect to the host, as cudaMemcpyAsync does).
  virtual Status CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual Status CopyToDevice(void* dst, const void* src, size_t bytes) = 0;

  // One kernel launch: every segment copied from src to dst and multiplied by `scale` (1.0: a
  // plain copy; float16 and bfloat16 scaled in float32; integers rounded as the host's
  // collectives::Scale does). The pack and unpack of a fused batch.
  // InvalidArgument for bool with a scale other than 1, or (when scaling) a pointer not aligned
  // to its element. Segments must not overlap one another (src == dst within one is fine); empty
  // ones are skipped. Full speed needs src and dst at the same address modulo 16 (the caching
  // allocator's tensors are 512-byte aligned: keep fusion-buffer offsets multiples of 16).
  virtual Status BatchedCopy(const Segment* segments, size_t n, DataType dtype, double scale) = 0;
};

class GpuBackend {
 public:
  GpuBackend() = default;
  GpuBackend(const GpuBackend&) = delete;
  GpuBackend& operator=(const GpuBackend&) = delete;
  virtual ~GpuBackend() = default;

  // "CUDA runtime 13000, driver 13000, 1 device(s)": for the one-time INFO line and reports.
  virtual std::string Describe() const = 0;
  virtual int device_count() const = 0;

  // The device, created on first use (its stream too). Never null on OK; owned by the backend.
  virtual Status GetDevice(int ordinal, Device** out) = 0;

  // Loads NCCL (HVD_NCCL_LIBRARY, else libnccl.so.2 by the loader's search path, else
  // /usr/local/cuda/lib64/libnccl.so.2) once; FailedPrecondition naming every path tried.
  virtual Status LoadNccl() = 0;
  // NCCL's version as ncclGetVersion reports it (22703 for 2.27.3); 0 before LoadNccl succeeds.
  virtual int nccl_version() const = 0;

  // ncclGetUniqueId: 128 opaque bytes. REQUIRES: LoadNccl() succeeded.
  virtual Status NcclUniqueId(std::string* id) = 0;

  // ncclCommInitRankConfig, non-blocking, on `device`, polled until it is ready. Before the
  // deadline, `cancelled` is polled too (a peer failed, shutdown): when it returns a non-OK
  // Status, or when `timeout` passes, the communicator is aborted and that Status (or
  // DeadlineExceeded) is returned. REQUIRES: LoadNccl() succeeded; `id` came from rank 0's
  // NcclUniqueId.
  virtual Status NcclInit(const std::string& id, int rank, int size, int device,
                          std::chrono::milliseconds timeout,
                          const std::function<Status()>& cancelled,
                          std::unique_ptr<NcclComm>* out) = 0;
};

// Loads libhvd_cuda.so (HVD_CUDA_PLUGIN, else the file beside libhvd.so, else the loader's search
// path) and creates its backend, once per process; later calls return the same result.
// FailedPrecondition starting "no GPU: " when this build has no CUDA support, the plugin or the
// CUDA runtime cannot be loaded, or no device is visible. Thread-safe.
Status LoadGpuBackend(GpuBackend** out);

// Tests only: LoadGpuBackend returns `backend` (not owned, never freed) from now on, instead of
// loading the plugin; null restores loading. Call it before the first LoadGpuBackend.
void SetGpuBackendForTesting(GpuBackend* backend);

// The plugin's entry point (extern "C", resolved with dlsym): fills *out with a new backend, or
// returns a non-OK status. `abi` must equal kGpuBackendAbi, else the plugin refuses (a plugin
// and a libhvd.so from different builds).
inline constexpr int kGpuBackendAbi = 4;
using CreateGpuBackendFn = Status (*)(int abi, std::unique_ptr<GpuBackend>* out);
inline constexpr const char* kCreateGpuBackendSymbol = "hvd_create_gpu_backend";

}  // namespace hvd::runtime::gpu
