// The staged path of GPU batches: device inputs copied to host buffers after the caller's stream,
// the host collective run on them, the outputs copied back; the caller's tensor pointers swapped
// for the host copies meanwhile and restored whatever happens. Used where NCCL cannot run (ranks
// sharing a GPU, NCCL missing on a rank, int16, Adasum, a byte broadcast sized by its root).
#include <memory>
#include <set>

#include "core/device_executor.h"

namespace hvd::runtime::core {

Status DeviceExecutor::Staged(const std::vector<StagedTensor>& tensors,
                              const std::function<Status()>& run) {
  staged_batches_.fetch_add(1);
  struct Swap {
    Tensor* t;
    void* device_data;
    int device;
    bool copy_back;
  };
  std::vector<Swap> swaps;
  std::vector<std::unique_ptr<std::vector<char>>> host;
  std::set<gpu::Device*> used;
  Status s;
  for (const StagedTensor& x : tensors) {
    Tensor& in = x.op->inputs[x.index];
    if (in.device < 0) continue;
    gpu::Device* d = nullptr;
    if (backend_ == nullptr) s = gpu::LoadGpuBackend(&backend_);
    if (s.ok()) s = backend_->GetDevice(in.device, &d);
    if (s.ok()) {
      used.insert(d);
      s = WaitReady(d, x.op);
    }
    if (!s.ok()) break;
    const size_t bytes = static_cast<size_t>(in.num_elements()) * DataTypeSize(in.dtype);
    host.push_back(std::make_unique<std::vector<char>>(std::max<size_t>(bytes, 1)));
    char* h = host.back()->data();
    if (bytes > 0) s = d->CopyToHost(h, in.data, bytes);
    // In place (a broadcast, an in-place allreduce): the output shares the host copy.
    Tensor* out = x.index < x.op->outputs.size() ? &x.op->outputs[x.index] : nullptr;
    if (out != nullptr && out->data == in.data) {
      swaps.push_back({out, out->data, out->device, true});
      out->data = h;
      out->device = -1;
      out = nullptr;
    }
    swaps.push_back({&in, in.data, in.device, false});
    in.data = h;
    in.device = -1;
    if (out != nullptr && out->device >= 0) {
      const size_t ob = static_cast<size_t>(out->num_elements()) * DataTypeSize(out->dtype);
      host.push_back(std::make_unique<std::vector<char>>(std::max<size_t>(ob, 1)));
      swaps.push_back({out, out->data, out->device, true});
      out->data = host.back()->data();
      out->device = -1;
    }
    if (!s.ok()) break;
  }
  for (gpu::Device* d : used) {
    if (s.ok()) s = d->Synchronize();
  }
  if (s.ok()) s = run();
  // Results back to the device; the caller's pointers restored whatever happened.
  std::set<gpu::Device*> written;
  for (Swap& w : swaps) {
    void* h = w.t->data;
    w.t->data = w.device_data;
    w.t->device = w.device;
    if (!s.ok() || !w.copy_back) continue;
    const size_t bytes = static_cast<size_t>(w.t->num_elements()) * DataTypeSize(w.t->dtype);
    gpu::Device* d = nullptr;
    s = backend_->GetDevice(w.device, &d);
    if (s.ok() && bytes > 0) s = d->CopyToDevice(w.device_data, h, bytes);
    if (s.ok()) written.insert(d);
  }
  for (gpu::Device* d : written) {
    if (s.ok()) s = d->Synchronize();
  }
  return s;
}

}  // namespace hvd::runtime::core
