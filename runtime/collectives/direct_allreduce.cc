// Direct allreduce, the latency path for small buffers: every rank sends its whole buffer to
// every other rank in one round (transport::Exchange drives all links at once), then reduces
// locally.
//
// Vocabulary (N ranks, this rank r):
//   copy q     - rank q's input: for q = r this rank's buffer, or out of place its input until the
//                chain first reduces into the buffer (ReduceTo: the input is read, never
//                written, nor copied to the buffer in a pass of its own); else the bytes
//                received from q (gathered into a per-thread scratch area, or with the
//                negotiation).
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

Status DirectAllreduce(const Comm& comm, const void* in, void* buf, const std::vector<size_t>& off,
                       DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kAverage) {
    return InvalidArgument("direct allreduce: kAverage must be a sum followed by Scale");
  }
  const int n = comm.size();
  const int r = comm.rank();
  const size_t es = DataTypeSize(dtype);
  const size_t bytes = off.back() * es;
  char* own = static_cast<char*>(buf);
  // This rank's input: `in` out of place (never written), else the buffer itself.
  const char* mine = in != nullptr && in != buf ? static_cast<const char*>(in) : own;
  if (bytes == 0) return Status::OK();
  if (n == 1) {
    if (mine != own) std::memcpy(own, mine, bytes);
    return Status::OK();
  }
  // Rank q's copy at gathered + stride x q (this rank's slot unused: its copy is `mine`, then,
  // once a chain has reduced into it, `own`).
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
    Status s =
        transport::ExchangeWithAll(*comm.transport, mine, bytes, gathered, comm.idle_timeout);
    if (!s.ok()) return s.WithContext("direct allreduce");
  }
  auto peer_copy = [&](int q) { return gathered + stride * static_cast<size_t>(q); };

  // Every send has completed, so reducing into our own buffer cannot clobber bytes in flight.
  const size_t parts = off.size() - 1;
  for (size_t i = 0; i < parts; ++i) {
    const size_t begin = off[i] * es, count = off[i + 1] - off[i];
    if (count == 0) continue;
    const int first = static_cast<int>(i % n);
    bool reduced_into_own = false;  // this part's chain has written this rank's copy to `own`
    auto current = [&](int q) -> const char* {  // rank q's copy of the part as the chain has it
      if (q != r) return peer_copy(q) + begin;
      return (reduced_into_own ? own : mine) + begin;
    };
    for (int k = 1; k < n; ++k) {
      const int d = (first + k) % n, s = (first + k - 1) % n;
      char* dst = (d == r ? own : peer_copy(d)) + begin;
      // Out of place, this rank's first reduction reads its input and writes its buffer.
      ReduceTo(dst, current(d), current(s), nullptr, count, dtype, op);
      if (d == r) reduced_into_own = true;
    }
    const int last = (first + n - 1) % n;
    if (last != r) std::memcpy(own + begin, peer_copy(last) + begin, count * es);
  }
  return Status::OK();
}

Status DirectAllreduce(const Comm& comm, void* buf, const std::vector<size_t>& off, DataType dtype,
                       ReduceOp op) {
  return DirectAllreduce(comm, nullptr, buf, off, dtype, op);
}

}  // namespace hvd::runtime::collectives
