// internal::Operation: one submitted operation, shared between the caller's Handle and the
// background thread. The caller's tensors are referenced, never copied; outputs whose size is
// only known after negotiation (allgather, alltoall, reducescatter) are owned here.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "gpu/gpu_backend.h"
#include "hvd/hvd.h"
#include "negotiation/message.h"

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

 private:
  mutable base::Mutex mu_;
  mutable base::CondVar cv_;
  bool completing_ HVD_GUARDED_BY(mu_) = false;  // Complete() called; the callback may be running
  bool done_ HVD_GUARDED_BY(mu_) = false;
  Status status_ HVD_GUARDED_BY(mu_);
};

}  // namespace hvd::internal
