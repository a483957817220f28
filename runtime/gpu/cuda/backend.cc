// The plugin's GpuBackend and its one exported symbol, hvd_create_gpu_backend
// (runtime/gpu/gpu_backend.h): devices made on first use, NCCL loaded on first need.
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>

#include "gpu/cuda/cuda_check.h"
#include "gpu/cuda/device.h"
#include "gpu/cuda/nccl_comm.h"
#include "gpu/cuda/nccl_loader.h"
#include "gpu/gpu_backend.h"

namespace hvd::runtime::gpu::cuda {
namespace {

class CudaBackend final : public GpuBackend {
 public:
  static Status Create(std::unique_ptr<GpuBackend>* out) {
    auto b = std::unique_ptr<CudaBackend>(new CudaBackend());
    HVD_CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&b->runtime_version_), "cudaRuntimeGetVersion");
    HVD_CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&b->driver_version_), "cudaDriverGetVersion");
    HVD_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&b->device_count_), "cudaGetDeviceCount");
    if (b->device_count_ == 0) return FailedPrecondition("the CUDA driver sees no device");
    *out = std::move(b);
    return Status::OK();
  }

  std::string Describe() const override {
    std::string s = "CUDA runtime " + std::to_string(runtime_version_) + ", driver " +
                    std::to_string(driver_version_) + ", " + std::to_string(device_count_) +
                    " device(s)";
    const int nccl = nccl_version();
    if (nccl != 0) s += ", NCCL " + std::to_string(nccl);
    return s;
  }

  int device_count() const override { return device_count_; }

  Status GetDevice(int ordinal, Device** out) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (ordinal < 0 || ordinal >= device_count_) {
      return InvalidArgument("CUDA device " + std::to_string(ordinal) +
                             " does not exist: " + std::to_string(device_count_) +
                             " visible (CUDA_VISIBLE_DEVICES applies)");
    }
    auto it = devices_.find(ordinal);
    if (it == devices_.end()) {
      std::unique_ptr<CudaDevice> d;
      HVD_RETURN_IF_ERROR(CudaDevice::Create(ordinal, &d));
      it = devices_.emplace(ordinal, std::move(d)).first;
    }
    *out = it->second.get();
    return Status::OK();
  }

  Status LoadNccl() override {
    const NcclApi* api = nullptr;
    HVD_RETURN_IF_ERROR(LoadNcclApi(&api));
    std::lock_guard<std::mutex> lock(mu_);
    nccl_ = api;
    return Status::OK();
  }

  int nccl_version() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return nccl_ != nullptr ? nccl_->version : 0;
  }

  Status NcclUniqueId(std::string* id) override {
    const NcclApi* api = Nccl();
    if (api == nullptr) return FailedPrecondition("NcclUniqueId before LoadNccl succeeded");
#ifdef HVD_HAVE_NCCL_H
    ncclUniqueId uid;
    const ncclResult_t r = api->GetUniqueId(&uid);
    if (r != ncclSuccess) return NcclError(*api, r, "ncclGetUniqueId");
    id->assign(reinterpret_cast<const char*>(&uid), sizeof(uid));
    return Status::OK();
#else
    return LoadNcclApi(&api);
#endif
  }

  Status NcclInit(const std::string& id, int rank, int size, int device,
                  std::chrono::milliseconds timeout, const std::function<Status()>& cancelled,
                  std::unique_ptr<NcclComm>* out) override {
    const NcclApi* api = Nccl();
    if (api == nullptr) return FailedPrecondition("NcclInit before LoadNccl succeeded");
    return NcclInitComm(api, id, rank, size, device, timeout, cancelled, out);
  }

 private:
  CudaBackend() = default;

  const NcclApi* Nccl() const {
    std::lock_guard<std::mutex> lock(mu_);
    return nccl_;
  }

  int runtime_version_ = 0;
  int driver_version_ = 0;
  int device_count_ = 0;
  mutable std::mutex mu_;
  std::map<int, std::unique_ptr<CudaDevice>> devices_;  // guarded by mu_
  const NcclApi* nccl_ = nullptr;                       // guarded by mu_
};

}  // namespace
}  // namespace hvd::runtime::gpu::cuda

// The only symbol libhvd_cuda.so exports (plugin.map). The ABI number guards the layouts of the
// interface classes and of Status, which cross between libhvd.so and this plugin.
extern "C" __attribute__((visibility("default"))) hvd::Status hvd_create_gpu_backend(
    int abi, std::unique_ptr<hvd::runtime::gpu::GpuBackend>* out) {
  if (abi != hvd::runtime::gpu::kGpuBackendAbi) {
    return hvd::FailedPrecondition(
        "libhvd_cuda.so implements GPU backend ABI " +
        std::to_string(hvd::runtime::gpu::kGpuBackendAbi) + " but libhvd.so asks for " +
        std::to_string(abi) +
        ": the two come from different builds; use the plugin built with "
        "this libhvd.so");
  }
  return hvd::runtime::gpu::cuda::CudaBackend::Create(out);
}
