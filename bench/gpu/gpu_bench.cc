// gpu_bench: the GPU data path's two numbers (issue 21), on device 0 of this machine.
//   (a) BatchedCopy (one kernel for every segment) against cudaMemcpyAsync device to device for
//       the same bytes: 64 MiB as one segment, and ResNet-50's 161 gradients packed into a fusion
//       buffer and unpacked; GB/s count bytes read plus written; goal: at least 80% of the copy.
//   (b) Fused against unfused for the 161 gradients through a single-rank NCCL communicator:
//       pack + one ncclAllReduce + unpack, against 161 ncclAllReduce calls.
// Times come from cudaEvents on the runtime's stream: the median of --reps after --warmup.
// Prints markdown tables; where no GPU can be used it prints "skipped: <reason>" and exits 0.
//
//   build/bench/gpu_bench [--reps N] [--warmup N]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_backend.h"
#include "gpu/resnet50_shapes.h"

namespace hvd::bench {
namespace {

using runtime::gpu::Device;
using runtime::gpu::GpuBackend;
using runtime::gpu::NcclComm;
using runtime::gpu::Segment;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "gpu_bench: %s\n", what.c_str());
  std::exit(1);
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

void CheckCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorString(e));
}

struct Options {
  int reps = 30;
  int warmup = 5;
};

// Milliseconds of one `enqueue` on `stream`: the median of opt.reps, after opt.warmup.
double MedianMs(cudaStream_t stream, const Options& opt, const std::function<void()>& enqueue) {
  cudaEvent_t start, stop;
  CheckCuda(cudaEventCreate(&start), "cudaEventCreate");
  CheckCuda(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < opt.warmup; ++i) enqueue();
  CheckCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (warm-up)");
  std::vector<float> ms;
  for (int i = 0; i < opt.reps; ++i) {
    CheckCuda(cudaEventRecord(start, stream), "cudaEventRecord");
    enqueue();
    CheckCuda(cudaEventRecord(stop, stream), "cudaEventRecord");
    CheckCuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    CheckCuda(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double GBps(size_t bytes, double ms) {
  return 2.0 * static_cast<double>(bytes) / (ms * 1e6);  // read + written
}

// ResNet-50's gradients laid out as a framework's allocator would: each 256-byte aligned.
struct Gradients {
  std::vector<size_t> offsets;  // bytes, in the arena
  std::vector<size_t> counts;   // elements
  size_t arena_bytes = 0;
  size_t packed_bytes = 0;
};

Gradients Layout(size_t elem) {
  Gradients g;
  for (const ParamShape& p : ResNet50Shapes()) {
    const size_t n = static_cast<size_t>(p.elements());
    g.offsets.push_back(g.arena_bytes);
    g.counts.push_back(n);
    g.arena_bytes += (n * elem + 255) / 256 * 256;
    g.packed_bytes += n * elem;
  }
  return g;
}

// The 161 gradients packed back to back into `fusion` (pack), and back out (unpack).
void PackSegments(const Gradients& g, void* grads, void* fusion, size_t esize,
                  std::vector<Segment>* pack, std::vector<Segment>* unpack) {
  size_t at = 0;
  for (size_t i = 0; i < g.counts.size(); ++i) {
    char* t = static_cast<char*>(grads) + g.offsets[i];
    char* f = static_cast<char*>(fusion) + at;
    pack->push_back({t, f, g.counts[i]});
    unpack->push_back({f, t, g.counts[i]});
    at += g.counts[i] * esize;
  }
}

void CopyTable(Device* dev, const Options& opt) {
  auto stream = static_cast<cudaStream_t>(dev->stream());
  std::printf("\n## BatchedCopy against cudaMemcpyAsync (device to device)\n\n");
  std::printf("| copy | bytes | BatchedCopy GB/s | cudaMemcpyAsync GB/s | ratio | %s |\n",
              "one cudaMemcpyAsync per segment GB/s");
  std::printf("|---|---|---|---|---|---|\n");
  auto row = [&](const char* name, DataType dtype, double scale, const std::vector<Segment>& segs,
                 void* dst, const void* src, size_t bytes) {
    const double kernel = MedianMs(stream, opt, [&] {
      Check(dev->BatchedCopy(segs.data(), segs.size(), dtype, scale), "BatchedCopy");
    });
    const double memcpy_one = MedianMs(stream, opt, [&] {
      CheckCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
                "cudaMemcpyAsync");
    });
    const double memcpy_each = MedianMs(stream, opt, [&] {
      const size_t elem = DataTypeSize(dtype);
      for (const Segment& s : segs) {
        CheckCuda(cudaMemcpyAsync(s.dst, s.src, s.count * elem, cudaMemcpyDeviceToDevice, stream),
                  "cudaMemcpyAsync");
      }
    });
    std::printf("| %s | %.1f MB | %.0f | %.0f | %.0f%% | %.0f |\n", name, bytes / 1e6,
                GBps(bytes, kernel), GBps(bytes, memcpy_one), 100.0 * memcpy_one / kernel,
                GBps(bytes, memcpy_each));
  };

  const size_t big = size_t{64} << 20;
  void *a = nullptr, *b = nullptr;
  CheckCuda(cudaMalloc(&a, big), "cudaMalloc");
  CheckCuda(cudaMalloc(&b, big), "cudaMalloc");
  CheckCuda(cudaMemset(a, 0, big), "cudaMemset");
  std::vector<Segment> one = {{a, b, big / 4}};
  row("64 MiB, 1 segment, float32, scale 1", DataType::kFloat32, 1.0, one, b, a, big);
  row("64 MiB, 1 segment, float32, scale 0.5", DataType::kFloat32, 0.5, one, b, a, big);
  std::vector<Segment> half = {{a, b, big / 2}};
  row("64 MiB, 1 segment, float16, scale 0.5", DataType::kFloat16, 0.5, half, b, a, big);
  cudaFree(a);
  cudaFree(b);

  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16}) {
    const Gradients g = Layout(DataTypeSize(dtype));
    void *grads = nullptr, *fusion = nullptr;
    CheckCuda(cudaMalloc(&grads, g.arena_bytes), "cudaMalloc");
    CheckCuda(cudaMemset(grads, 0, g.arena_bytes), "cudaMemset");
    Check(dev->Buffer(0, g.packed_bytes, &fusion), "Device::Buffer");
    std::vector<Segment> pack, unpack;
    PackSegments(g, grads, fusion, DataTypeSize(dtype), &pack, &unpack);
    const std::string d(DataTypeName(dtype));
    row(("ResNet-50 pack, 161 segments, " + d + ", scale 1").c_str(), dtype, 1.0, pack, fusion,
        grads, g.packed_bytes);
    row(("ResNet-50 unpack, 161 segments, " + d + ", scale 0.5").c_str(), dtype, 0.5, unpack, grads,
        fusion, g.packed_bytes);
    cudaFree(grads);
  }
  std::printf(
      "\nGB/s count bytes read plus written; ratio = cudaMemcpyAsync's time over "
      "BatchedCopy's (goal: >= 80%%).\n");
}

void FusionTable(GpuBackend* backend, Device* dev, const Options& opt) {
  std::printf(
      "\n## Fused against unfused: ResNet-50's 161 float32 gradients, single-rank NCCL\n\n");
  std::unique_ptr<NcclComm> comm;
  std::string id;
  Check(backend->NcclUniqueId(&id), "NcclUniqueId");
  Check(backend->NcclInit(id, 0, 1, dev->ordinal(), std::chrono::seconds(60), nullptr, &comm),
        "NcclInit");
  auto stream = static_cast<cudaStream_t>(dev->stream());
  const Gradients g = Layout(4);
  void *grads = nullptr, *fusion = nullptr;
  CheckCuda(cudaMalloc(&grads, g.arena_bytes), "cudaMalloc");
  CheckCuda(cudaMemset(grads, 0, g.arena_bytes), "cudaMemset");
  Check(dev->Buffer(0, g.packed_bytes, &fusion), "Device::Buffer");
  std::vector<Segment> pack, unpack;
  PackSegments(g, grads, fusion, 4, &pack, &unpack);
  const size_t total = g.packed_bytes / 4;
  const double fused = MedianMs(stream, opt, [&] {
    Check(dev->BatchedCopy(pack.data(), pack.size(), DataType::kFloat32, 1.0), "pack");
    Check(comm->Allreduce(fusion, fusion, total, DataType::kFloat32, ReduceOp::kSum, stream),
          "ncclAllReduce");
    Check(dev->BatchedCopy(unpack.data(), unpack.size(), DataType::kFloat32, 1.0), "unpack");
  });
  const double unfused = MedianMs(stream, opt, [&] {
    for (const Segment& s : pack) {
      Check(comm->Allreduce(s.src, const_cast<void*>(s.src), s.count, DataType::kFloat32,
                            ReduceOp::kSum, stream),
            "ncclAllReduce");
    }
  });
  std::printf("| path | launches | ms per step (median) |\n|---|---|---|\n");
  std::printf("| fused: pack + 1 ncclAllReduce (%.1f MB) + unpack | 3 | %.3f |\n",
              g.packed_bytes / 1e6, fused);
  std::printf("| unfused: 161 ncclAllReduce | 161 | %.3f |\n", unfused);
  std::printf("\nfused is %.2fx unfused\n", unfused / fused);
  cudaFree(grads);
}

int Main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--reps" || a == "--warmup") && i + 1 < argc) {
      const int v = std::atoi(argv[++i]);
      if (v < 1) Die(a + " needs a positive number");
      (a == "--reps" ? opt.reps : opt.warmup) = v;
    } else {
      std::fprintf(stderr, "usage: gpu_bench [--reps N] [--warmup N]\n");
      return 2;
    }
  }
#ifdef HVD_CUDA_PLUGIN_PATH
  // This binary links the runtime statically: point the loader at this tree's plugin.
  setenv("HVD_CUDA_PLUGIN", HVD_CUDA_PLUGIN_PATH, /*overwrite=*/0);
#endif
  GpuBackend* backend = nullptr;
  const Status loaded = runtime::gpu::LoadGpuBackend(&backend);
  if (!loaded.ok()) {
    std::printf("skipped: %s\n", loaded.message().c_str());
    return 0;
  }
  if (ResNet50Shapes().size() != kResNet50Tensors) Die("ResNet-50 shapes: not 161 tensors");
  Device* dev = nullptr;
  Check(backend->GetDevice(0, &dev), "GetDevice(0)");
  cudaDeviceProp prop{};
  CheckCuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int driver = 0, runtime_version = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime_version);
  const Status nccl = backend->LoadNccl();
  std::printf("# gpu_bench\n\n");
  std::printf("| GPU | driver | CUDA runtime | NCCL | backend |\n|---|---|---|---|---|\n");
  std::printf("| %s (sm_%d%d, %.0f GB) | %d | %d | %s | %s |\n", prop.name, prop.major, prop.minor,
              prop.totalGlobalMem / 1e9, driver, runtime_version,
              nccl.ok() ? std::to_string(backend->nccl_version()).c_str() : "not loaded",
              backend->Describe().c_str());
  CopyTable(dev, opt);
  if (nccl.ok()) {
    FusionTable(backend, dev, opt);
  } else {
    std::printf("\nfused/unfused skipped: %s\n", nccl.message().c_str());
  }
  return 0;
}

}  // namespace
}  // namespace hvd::bench

int main(int argc, char** argv) {
  return hvd::bench::Main(argc, argv);
}
