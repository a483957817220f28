// The executor runs the responses of one cycle, identically ordered on every rank: it plans
// batches (fusion/fusion_planner.h), packs fused allreduces into the fusion buffer
// (fusion/fusion_buffer.h), applies prescale/postscale/averaging, calls the collectives and
// completes the operations.
//
// A rank that has joined takes part without operations of its own: it contributes the reduce
// op's identity (zeros for sum/average) and zero rows to allgathers, and discards the results.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "core/device_executor.h"
#include "core/operation.h"
#include "fusion/fusion_planner.h"
#include "negotiation/message.h"
#include "timeline/timeline.h"

namespace hvd::runtime::core {

class Executor {
 public:
  // Finds this rank's pending operation for a key; nullptr when there is none (joined rank).
  using Lookup = std::function<internal::Operation*(const std::string& key)>;
  // Completes an operation (removes it from the pending table, then Operation::Complete).
  using Finish = std::function<void(const std::string& key, const Status& status)>;

  // Shared by every process set's runner (one background thread runs them all).
  // `gpu`: what batches of device tensors need (core/device_executor.h).
  Executor(fusion::FusionLimits fusion, timeline::Timeline* timeline,
           DeviceExecutorOptions gpu = {});
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs `responses`. `contributors` is the number of ranks that have not joined: averages divide
  // by it unless a response records its own count (Response::contributors). Operation failures
  // complete the operation; a non-OK return means the transport broke and the job cannot go on
  // (every pending operation must then be failed by the caller).
  // `comm` is the communicator of process set `set_id`, the responses were negotiated in.
  Status Execute(int set_id, const collectives::Comm& comm,
                 const std::vector<negotiation::Response>& responses, int contributors,
                 const Lookup& lookup, const Finish& finish);

  // Allreduce collectives run so far (EngineStats); readable from any thread.
  uint64_t allreduce_collectives() const { return allreduce_collectives_.load(); }
  const DeviceExecutor& device() const { return device_; }
  // Any thread: aborts the NCCL communicators (core/device_executor.h).
  void AbortDevice() { device_.Abort(); }
  // Background thread: process set `id` was removed (every member at the same point).
  void ForgetSet(int id) { device_.Forget(id); }

 private:
  Status RunAllreduceBatch(const collectives::Comm& comm, const std::vector<BatchRef>& items,
                           int contributors);
  // REQUIRES: item.op != nullptr (this rank holds the tensor).
  Status RunAllreduceAlone(const collectives::Comm& comm, const BatchRef& item, int contributors);
  // A batch with in-place items where rings run it: one allreduce over the packed items and the
  // in-place ones where they lie (executor_in_place.cc).
  // REQUIRES: collectives::ExtentsTake(comm, the batch's elements, its dtype).
  Status RunAllreduceInPlace(const collectives::Comm& comm, const std::vector<BatchRef>& items,
                             int contributors);
  // An item reduced in its own output: null once its input is there (prescaled, when it has a
  // prescale), else its input, for the collective to read as it goes (out of place).
  // REQUIRES: item.op != nullptr.
  static const void* PrepareInPlace(const BatchRef& item);
  // The ALLREDUCE activity of `items` (BatchRefs) on the timeline, when one records.
  template <typename Items>
  void TimelineAllreduceStart(const collectives::Comm& comm, const Items& items, size_t total);
  Status RunAdasum(const collectives::Comm& comm, const BatchRef& item, int contributors);
  // Tensor `t` of a response that is not an allreduce (each runs as its own collective).
  Status RunOther(const collectives::Comm& comm, const negotiation::Response& r, size_t t,
                  internal::Operation* op, int contributors);
  Status RunReducescatter(const collectives::Comm& comm, const negotiation::Response& r, size_t t,
                          internal::Operation* op, int contributors);

  fusion::FusionLimits fusion_;
  timeline::Timeline* timeline_;  // null unless this rank writes the timeline
  // Execute's, kept between calls (no allocation per operation at steady state): tensors left
  // to run by response, each response's operation (null: none on this rank), the batches
  // planned, the items of the one running.
  std::vector<size_t> remaining_;
  std::vector<internal::Operation*> ops_;
  std::vector<fusion::Batch> batches_;
  std::vector<BatchRef> refs_;
  std::vector<size_t> parts_;  // RunAllreduceAlone's layout
  std::vector<char> fusion_buffer_;
  std::vector<char> scratch_;
  std::atomic<uint64_t> allreduce_collectives_{0};
  DeviceExecutor device_;
};

}  // namespace hvd::runtime::core
