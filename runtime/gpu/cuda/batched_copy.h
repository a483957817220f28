// The pack and unpack of a fused batch: every segment copied (and scaled) by ONE kernel launch.
//
// The segments' table goes to the device with one asynchronous copy from pinned host memory, then
// the kernel's blocks split the segments between them (a block finds its segment by a binary
// search of the table). Each segment moves in 16-byte vectors where its source and destination
// allow (same address modulo 16), else in the widest unit they share, with the unaligned head and
// tail elements done one by one.
//
// Scaling (scale != 1): float32 and float64 in their own precision; float16 and bfloat16 in
// float32, rounded to nearest even; integers to the nearest integer, ties away from zero,
// saturated to the type's range, NaN giving 0 (as collectives::Scale does on the host); bool only
// with scale 1. A scale of exactly 1 copies bytes, whatever the type.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "gpu/gpu_backend.h"
#include "hvd/status.h"
#include "hvd/types.h"

namespace hvd::runtime::gpu::cuda {

// One device's staging tables. Not thread-safe: the device's owner serializes calls.
class BatchedCopier {
 public:
  BatchedCopier() = default;
  BatchedCopier(const BatchedCopier&) = delete;
  BatchedCopier& operator=(const BatchedCopier&) = delete;
  ~BatchedCopier();  // REQUIRES: the device is current and nothing enqueued still runs

  // Enqueues the copy on `stream` and returns. The device must be current. Segments may be in any
  // order; src == dst scales in place; other overlaps are undefined. InvalidArgument for a bool
  // scaled by anything but 1, or an element pointer not aligned to its type when scaling.
  Status Run(const Segment* segments, size_t n, DataType dtype, double scale, cudaStream_t stream);

 private:
  // A pinned host table, its device copy and the event recorded after the kernel that read it:
  // a slot is reused only once its event completed, so the background thread never waits for
  // the stream to drain (it grows the pool instead).
  struct Slot {
    void* host = nullptr;
    void* device = nullptr;
    size_t capacity = 0;  // bytes of each
    cudaEvent_t done = nullptr;
  };
  Status AcquireSlot(size_t bytes, Slot** out);

  std::vector<Slot> slots_;
  size_t next_ = 0;
};

}  // namespace hvd::runtime::gpu::cuda
