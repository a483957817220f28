// A GpuBackend whose "device memory" is host memory, for testing the runtime's GPU batches on
// machines with no GPU (CI): the negotiation of GPU operations, the per-set mode decision, the
// staged path (device -> host -> collective -> device) and the pointer bookkeeping around it run
// for real; only the CUDA calls are memcpy. By default it offers no NCCL (LoadNccl fails), as a
// host without NCCL would, so every GPU batch is staged; given a directory the ranks share, it
// offers the file-exchange NCCL of host_nccl.h and a GPU of its own to every process, so the set
// runs the NCCL path. The real backend is tested on a GPU (tests/gpu/).
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectives/reduce.h"
#include "gpu/gpu_backend.h"
#include "host_nccl.h"
#include "hvd/hvd.h"

namespace hvd::testing {

class HostDevice : public runtime::gpu::Device {
 public:
  HostDevice(int ordinal, std::string bus) : ordinal_(ordinal), bus_(std::move(bus)) {}
  int ordinal() const override { return ordinal_; }
  void* stream() override { return &stream_; }
  std::string bus_id() const override { return bus_; }
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
  Status Allocate(size_t bytes, void** out) override {
    if (fail_allocations) return Unavailable("out of memory (test)");
    *out = new char[bytes > 0 ? bytes : 1];
    ++allocated;
    return Status::OK();
  }
  void Free(void* p, void* stream) override {
    delete[] static_cast<char*>(p);
    ++freed;
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
  bool fail_allocations = false;
  std::atomic<int> recorded{0}, waited{0}, released{0}, allocated{0}, freed{0};

 private:
  const int ordinal_;
  const std::string bus_;
  char stream_ = 0;
  std::map<int, std::vector<char>> buffers_;
};

// A tensor on CUDA device `device` (this backend's host memory).
inline Tensor OnDevice(void* data, DataType dtype, std::vector<int64_t> shape, int device = 0) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.device = device;
  return t;
}

class HostGpuBackend : public runtime::gpu::GpuBackend {
 public:
  HostGpuBackend() = default;
  // With NCCL: FileNcclComm through `nccl_dir`, and bus ids of this process alone.
  explicit HostGpuBackend(std::string nccl_dir) : nccl_dir_(std::move(nccl_dir)) {}

  std::string Describe() const override { return "host memory posing as 2 GPUs (test)"; }
  int device_count() const override { return 2; }
  Status GetDevice(int ordinal, runtime::gpu::Device** out) override {
    if (ordinal < 0 || ordinal >= device_count()) {
      return InvalidArgument("no device " + std::to_string(ordinal));
    }
    auto& d = devices_[ordinal];
    if (!d) {
      std::string bus = "host:" + std::to_string(ordinal);
      if (!nccl_dir_.empty()) bus += ":pid" + std::to_string(getpid());
      d = std::make_unique<HostDevice>(ordinal, bus);
    }
    *out = d.get();
    return Status::OK();
  }
  Status LoadNccl() override {
    if (nccl_dir_.empty()) return FailedPrecondition("this test backend has no NCCL");
    return Status::OK();
  }
  int nccl_version() const override { return nccl_dir_.empty() ? 0 : 99999; }
  Status NcclUniqueId(std::string* id) override {
    HVD_RETURN_IF_ERROR(LoadNccl());
    // 128 bytes, as NCCL's: a name for this communicator's files, padded with zeros.
    std::string name = "comm" + std::to_string(getpid()) + "-" + std::to_string(next_comm_++);
    name.resize(128, '\0');
    *id = name;
    return Status::OK();
  }
  Status NcclInit(const std::string& id, int rank, int size, int device,
                  std::chrono::milliseconds timeout, const std::function<Status()>& cancelled,
                  std::unique_ptr<runtime::gpu::NcclComm>* out) override {
    HVD_RETURN_IF_ERROR(LoadNccl());
    ++comms;
    *out = std::make_unique<FileNcclComm>(nccl_dir_, std::string(id.c_str()), rank, size);
    return Status::OK();
  }
  HostDevice* device(int ordinal) { return devices_[ordinal].get(); }

  int comms = 0;

 private:
  const std::string nccl_dir_;
  int next_comm_ = 0;
  std::map<int, std::unique_ptr<HostDevice>> devices_;
};

}  // namespace hvd::testing
