// Direct allreduce, the latency path for small buffers: every rank sends its whole buffer to
// every other rank in one round (transport::Exchange drives all links at once), then reduces
// locally.
//
// Vocabulary (N ranks, this rank r):
//   copy q     - rank q's input: this rank's own buffer for q = r, else the bytes received from q
//                (gathered into a per-thread scratch area).
//   chain      - part i is reduced in ring order from rank i mod N: copy_{i+1} op= copy_i, then
//                copy_{i+2} op= copy_{i+1}, ... ; the last copy holds the result. This is the
//                order and operand order of the ring (ring_allreduce.cc), so the result is the
//                ring's bit for bit (collectives.h, "Allreduce").
// Cost: one message latency instead of the ring's 2(N-1), for (N-1) times the bytes on the wire
// and N-1 local reductions of the buffer per rank. Recursive doubling would send log2(N) times the
// bytes, but it sums in a tree order, and then the result would depend on the algorithm chosen
// (and so on the fusion threshold); docs/performance.md has the crossover measurements.
#include <cstring>
#include <string>

#include "collectives/collectives.h"
#include "collectives/pipeline.h"
#include "collectives/reduce.h"

namespace hvd::runtime::collectives {

Status DirectAllreduce(const Comm& comm, void* buf, const std::vector<size_t>& off, DataType dtype,
                       ReduceOp op) {
  if (op == ReduceOp::kAverage) {
    return InvalidArgument("direct allreduce: kAverage must be a sum followed by Scale");
  }
  const int n = comm.size();
  const int r = comm.rank();
  const size_t es = DataTypeSize(dtype);
  const size_t bytes = off.back() * es;
  if (n == 1 || bytes == 0) return Status::OK();
  char* own = static_cast<char*>(buf);
  // Rank q's copy at gathered + stride x q (this rank's slot unused: its copy is `own`).
  char* gathered;
  size_t stride = bytes;
  if (comm.gathered != nullptr) {  // they came with the negotiation
    if (comm.gathered->bytes != bytes) {
      return Internal("direct allreduce: " + std::to_string(bytes) + " bytes, but " +
                      std::to_string(comm.gathered->bytes) + " were gathered");
    }
    gathered = comm.gathered->base;
    stride = comm.gathered->stride;
  } else {
    gathered = internal::ThreadScratch(internal::Scratch::kGather, bytes * n);
    Status s = transport::ExchangeWithAll(*comm.transport, own, bytes, gathered, comm.idle_timeout);
    if (!s.ok()) return s.WithContext("direct allreduce");
  }
  auto copy = [&](int q) -> char* {
    q = ((q % n) + n) % n;
    return q == r ? own : gathered + stride * static_cast<size_t>(q);
  };

  // Every send has completed, so reducing into our own buffer cannot clobber bytes in flight.
  const size_t parts = off.size() - 1;
  for (size_t i = 0; i < parts; ++i) {
    const size_t begin = off[i] * es, count = off[i + 1] - off[i];
    if (count == 0) continue;
    const int first = static_cast<int>(i % n);
    for (int k = 1; k < n; ++k) {
      ReduceInto(copy(first + k) + begin, copy(first + k - 1) + begin, count, dtype, op);
    }
    char* result = copy(first + n - 1);
    if (result != own) std::memcpy(own + begin, result + begin, count * es);
  }
  return Status::OK();
}

}  // namespace hvd::runtime::collectives
