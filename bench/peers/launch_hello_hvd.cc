// launch_hello_hvd: what "launch to first allreduce" times for hvd (bench/peers/compare.py):
// hvd::Init, one allreduce of one int (each rank's rank + 1), a check of the sum, hvd::Shutdown.
// The MPI and torch.distributed programs beside it do exactly the same.
#include <cstdint>
#include <cstdio>

#include "hvd/hvd.h"

int main() {
  hvd::Status s = hvd::Init();
  if (!s.ok()) {
    std::fprintf(stderr, "launch_hello_hvd: %s\n", s.ToString().c_str());
    return 1;
  }
  const int64_t n = hvd::Size();
  int32_t v = hvd::Rank() + 1;
  hvd::Tensor t = hvd::MakeTensor(&v, hvd::DataType::kInt32, 1);
  hvd::AllreduceOptions sum;
  sum.op = hvd::ReduceOp::kSum;
  s = hvd::Allreduce("hello", t, t, sum);
  if (!s.ok() || v != n * (n + 1) / 2) {
    std::fprintf(stderr, "launch_hello_hvd: rank %d: allreduce gave %d (want %lld): %s\n",
                 hvd::Rank(), v, static_cast<long long>(n * (n + 1) / 2), s.ToString().c_str());
    return 1;
  }
  s = hvd::Shutdown();
  return s.ok() ? 0 : 1;
}
