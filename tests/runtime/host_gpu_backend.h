// A GpuBackend whose "device memory" is host memory, for testing the runtime's GPU batches on
// machines with no GPU (CI): the negotiation of GPU operations, the per-set mode decision, the
// staged path (device -> host -> collective -> device) and the pointer bookkeeping around it run
// for real; only the CUDA calls are memcpy. It offers no NCCL (LoadNccl fails), as a host without
// NCCL would, so every GPU batch is staged. The real backend is tested on a GPU (tests/gpu/).
#pragma once

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectives/reduce.h"
#include "gpu/gpu_backend.h"

namespace hvd::testing {

class HostDevice : public runtime::gpu::Device {
 public:
  explicit HostDevice(int ordinal) : ordinal_(ordinal) {}
  int ordinal() const override { return ordinal_; }
  void* stream() override { return &stream_; }
  std::string bus_id() const override { return "host:" + std::to_string(ordinal_); }
  Status WaitFor(void* caller_stream) override {
    ++waits;
    return Status::OK();
  }
  // Events are counted tokens: every one recorded must be waited on or released exactly once.
  Status RecordReady(void* caller_stream, void** event) override {
    ++recorded;
    *event = new int(0);
    return Status::OK();
  }
  Status WaitReady(void* event) override {
    ++waited;
    delete static_cast<int*>(event);
    return Status::OK();
  }
  void ReleaseReady(void* event) override {
    ++released;
    delete static_cast<int*>(event);
  }
  Status Synchronize() override {
    ++syncs;
    return Status::OK();
  }
  Status Query(bool* done) override {
    *done = true;
    return Status::OK();
  }
  Status Buffer(int slot, size_t bytes, void** out) override {
    std::vector<char>& b = buffers_[slot];
    if (b.size() < bytes) b.resize(bytes);
    *out = b.data();
    return Status::OK();
  }
  Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    ++copies;
    return Status::OK();
  }
  Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    ++copies;
    return Status::OK();
  }
  Status BatchedCopy(const runtime::gpu::Segment* segments, size_t n, DataType dtype,
                     double scale) override {
    for (size_t i = 0; i < n; ++i) {
      const runtime::gpu::Segment& s = segments[i];
      if (s.src != s.dst) std::memmove(s.dst, s.src, s.count * DataTypeSize(dtype));
      if (scale != 1.0) runtime::collectives::Scale(s.dst, s.count, dtype, scale);
    }
    return Status::OK();
  }

  int waits = 0, syncs = 0, copies = 0;
  std::atomic<int> recorded{0}, waited{0}, released{0};

 private:
  const int ordinal_;
  char stream_ = 0;
  std::map<int, std::vector<char>> buffers_;
};

class HostGpuBackend : public runtime::gpu::GpuBackend {
 public:
  std::string Describe() const override { return "host memory posing as 2 GPUs (test)"; }
  int device_count() const override { return 2; }
  Status GetDevice(int ordinal, runtime::gpu::Device** out) override {
    if (ordinal < 0 || ordinal >= device_count()) {
      return InvalidArgument("no device " + std::to_string(ordinal));
    }
    auto& d = devices_[ordinal];
    if (!d) d = std::make_unique<HostDevice>(ordinal);
    *out = d.get();
    return Status::OK();
  }
  Status LoadNccl() override {
    return FailedPrecondition("this test backend has no NCCL");
  }
  int nccl_version() const override { return 0; }
  Status NcclUniqueId(std::string* id) override {
    return FailedPrecondition("this test backend has no NCCL");
  }
  Status NcclInit(const std::string& id, int rank, int size, int device,
                  std::chrono::milliseconds timeout, const std::function<Status()>& cancelled,
                  std::unique_ptr<runtime::gpu::NcclComm>* out) override {
    return FailedPrecondition("this test backend has no NCCL");
  }
  HostDevice* device(int ordinal) { return devices_[ordinal].get(); }

 private:
  std::map<int, std::unique_ptr<HostDevice>> devices_;
};

}  // namespace hvd::testing
