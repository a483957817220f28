// internal::Operation: one submitted operation, shared between the caller's Handle and the
// background thread. The caller's tensors are referenced, never copied; outputs whose size is
// only known after negotiation (allgather, alltoall, reducescatter) are owned here.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "gpu/gpu_backend.h"
#include "hvd/hvd.h"
#include "negotiation/message.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HVD_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HVD_SANITIZED 1
#endif

namespace hvd::internal {

// The engine's background thread marks itself; Wait() and Shutdown() called there (from a
// callback) fail at once instead of waiting for that very thread.
void MarkBackgroundThread();
bool OnBackgroundThread();

// A caller's thread running the engine's rounds (HVD_RUN_ON_CALLER) counts as the background
// thread meanwhile: callbacks it runs must not block either.
class ScopedBackgroundThread {
 public:
  ScopedBackgroundThread();
  ~ScopedBackgroundThread();
  ScopedBackgroundThread(const ScopedBackgroundThread&) = delete;
  ScopedBackgroundThread& operator=(const ScopedBackgroundThread&) = delete;

 private:
  const bool was_;
};

class Operation {
 public:
  Operation() = default;
  ~Operation();
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;

  // What the background thread negotiates.
  runtime::negotiation::Request request;
  // The caller's memory, one entry per tensor of the request (inputs == outputs when in place).
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  Callback callback;

  // Results owned by the operation, one per tensor of the request, for the operations whose
  // output size is only known after negotiation (see Handle::output_data()).
  struct Result {
    // Host memory, except for a result made on NCCL: then `data` is empty and the result is
    // `device_bytes` at `device_data` on `device` (owned: freed with the operation, in order after
    // the caller's stream `free_stream`, the inputs' stream).
    std::vector<char> data;
    runtime::gpu::Device* device = nullptr;
    void* device_data = nullptr;
    size_t device_bytes = 0;
    void* free_stream = nullptr;
    std::vector<int64_t> shape;
    // First-dimension rows per rank of the process set: allgather, gathered from each;
    // alltoall, received from each; reducescatter, the share each got.
    std::vector<int64_t> splits;
  };
  std::vector<Result> results;
  // Device operations: one event per (device, caller stream), recorded at submission on the
  // caller's stream; the runtime's stream waits for it before touching the tensors (consumed:
  // event set to null). Events never waited for go back to their device's pool with the operation.
  struct ReadyEvent {
    runtime::gpu::Device* device = nullptr;
    void* stream = nullptr;
    void* event = nullptr;
  };
  std::vector<ReadyEvent> ready;
  int last_joined_rank = -1;  // join
  int result_id = -1;         // add_process_set: the new set's id
  // The engine it was queued in (set under that engine's lock): a thread waiting for it runs that
  // engine's rounds only (Engine::RunUntilDone), never a later session's.
  const void* engine = nullptr;

  // Whether its tensors are in device (GPU) memory.
  bool on_device() const {
    for (const Tensor& t : inputs) {
      if (t.device >= 0) return true;
    }
    return false;
  }

  // Runs the callback, then marks the operation done (waking waiters). Later calls do nothing.
  void Complete(const Status& status);

  bool done() const;
  Status Wait() const;
  // False when `timeout` passes first.
  bool WaitFor(std::chrono::milliseconds timeout) const;
  Status status() const;
  // The error Wait() returns on the background thread for an operation not yet completed.
  Status BackgroundWaitError() const;

  // An operation that failed before it was submitted.
  static std::shared_ptr<Operation> Failed(const Status& status);

  // An operation for a single-tensor allreduce, taken from this thread's pool of released ones
  // (a new one when it is empty): its strings and vectors keep their capacity, so that a steady
  // stream of allreduces allocates nothing for its name, specs and tensors (each allocation is
  // about a tenth of a microsecond, and a small allreduce made a dozen). Every field is as a new
  // operation's, except that `request.key` keeps its memory and `inputs`, `outputs` and
  // `request.tensors` still hold the previous operation's values: the caller assigns all four
  // (an assignment reuses their memory). The operation goes back, reset, to the pool of the
  // thread that drops its last reference; a pool keeps at most kPooledPerThread.
  static std::shared_ptr<Operation> Reused();
#ifdef HVD_SANITIZED
  static constexpr size_t kPooledPerThread = 0;  // a sanitizer sees each operation's lifetime
#else
  static constexpr size_t kPooledPerThread = 8;
#endif

 private:
  struct Recycle {
    void operator()(Operation* op) const;
  };
  // Back to a new operation's state, but for the four fields above (REQUIRES: no other reference).
  void Reset() HVD_NO_THREAD_SAFETY_ANALYSIS;
  // Frees what the operation holds on a device (unused ready events, NCCL-made results).
  void ReleaseDevice();
  // REQUIRES: done() returned true.
  Status FinalStatus() const HVD_NO_THREAD_SAFETY_ANALYSIS;

  mutable base::Mutex mu_;
  mutable base::CondVar cv_;
  bool completing_ HVD_GUARDED_BY(mu_) = false;  // Complete() called; the callback may be running
  // Written under mu_ (with status_ final before it), read without it: a completed operation's
  // status never changes, so done() and a Wait() that finds it done take no lock.
  std::atomic<bool> done_{false};
  Status status_ HVD_GUARDED_BY(mu_);
};

}  // namespace hvd::internal
