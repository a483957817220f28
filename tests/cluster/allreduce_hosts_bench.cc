// hvd_allreduce_hosts: the bandwidth of hvd::Allreduce between the hosts of a job, through the
// public API (negotiation, the engine, the TCP ring over the network the launcher chose), for the
// shaped-link benchmark (tests/cluster/shaped_bench.sh). Run it under hvdrun, one rank per host:
//
//   hvdrun -H a:1,b:1,c:1 hvd_allreduce_hosts [--sizes 4M,64M] [--iters N] [--warmup N]
//
// Each size is float32 sums of a `size`-byte tensor; the time of an operation is the slowest
// rank's (a max-allreduce of the per-rank times). Rank 0 prints, per size, the time per operation,
// algbw = size / time and busbw = algbw * 2(N-1)/N (what each link of a ring carries), in Gbit/s.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace {

bool ParseSize(const std::string& s, size_t* out) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit = end;
  const double scale = unit.empty() ? 1 : unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20 : 0;
  if (!(v > 0) || scale == 0) return false;
  *out = static_cast<size_t>(v * scale);
  return *out >= 4;
}

int Usage(const char* why) {
  std::fprintf(stderr,
               "hvd_allreduce_hosts: %s\nusage: hvd_allreduce_hosts [--sizes 4M,64M] [--iters N] "
               "[--warmup N]  (under hvdrun)\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes = {4 << 20, 64 << 20};
  int iters = 5, warmup = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return Usage(("missing value for " + flag).c_str());
    const std::string v = argv[++i];
    if (flag == "--sizes") {
      sizes.clear();
      for (size_t start = 0; start <= v.size();) {
        const size_t comma = std::min(v.find(',', start), v.size());
        size_t bytes = 0;
        if (!ParseSize(v.substr(start, comma - start), &bytes)) return Usage("bad --sizes");
        sizes.push_back(bytes);
        start = comma + 1;
      }
    } else if (flag == "--iters" || flag == "--warmup") {
      const int n = std::atoi(v.c_str());
      if (n < (flag == "--iters" ? 1 : 0) || n > 1000) return Usage(("bad " + flag).c_str());
      (flag == "--iters" ? iters : warmup) = n;
    } else {
      return Usage(("unknown flag " + flag).c_str());
    }
  }
  hvd::Status s = hvd::Init();
  if (!s.ok()) {
    std::fprintf(stderr, "hvd_allreduce_hosts: %s\n", s.ToString().c_str());
    return 1;
  }
  const int rank = hvd::Rank(), n = hvd::Size();
  if (rank == 0) {
    std::printf("# hvd::Allreduce (float32 sum) across %d ranks; busbw = algbw * 2(N-1)/N\n", n);
    std::printf("# %12s %12s %12s %12s\n", "bytes", "time_ms", "algbw_Gbps", "busbw_Gbps");
  }
  for (size_t bytes : sizes) {
    std::vector<float> buf(bytes / sizeof(float), 1.0f);
    hvd::Tensor t =
        hvd::MakeTensor(buf.data(), hvd::DataType::kFloat32, static_cast<int64_t>(buf.size()));
    hvd::AllreduceOptions sum;
    sum.op = hvd::ReduceOp::kSum;
    const std::string name = "bench." + std::to_string(bytes);
    for (int i = 0; s.ok() && i < warmup; ++i) s = hvd::Allreduce(name, t, t, sum);
    if (s.ok()) s = hvd::Barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; s.ok() && i < iters; ++i) s = hvd::Allreduce(name, t, t, sum);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    hvd::AllreduceOptions max;
    max.op = hvd::ReduceOp::kMax;
    if (s.ok()) {
      s = hvd::Allreduce("bench.time", hvd::MakeTensor(&seconds, hvd::DataType::kFloat64, 1),
                         hvd::MakeTensor(&seconds, hvd::DataType::kFloat64, 1), max);
    }
    if (!s.ok()) break;
    const double per_op = seconds / iters;
    const double algbw = static_cast<double>(bytes) * 8 / per_op / 1e9;
    if (rank == 0) {
      std::printf("  %12zu %12.2f %12.3f %12.3f\n", bytes, per_op * 1e3, algbw,
                  algbw * 2.0 * (n - 1) / n);
      std::fflush(stdout);
    }
  }
  hvd::Status end = hvd::Shutdown();
  if (!s.ok() || !end.ok()) {
    std::fprintf(stderr, "hvd_allreduce_hosts: rank %d: %s\n", rank,
                 (s.ok() ? end : s).ToString().c_str());
    return 1;
  }
  return 0;
}
