// Allgather with per-rank byte counts: a pipelined ring.
//
// Vocabulary (N ranks, this rank r, indices mod N):
//   block i    - bytes [off[i], off[i] + bytes[i]) of `out`: rank i's contribution. Any size,
//                including 0.
//   S_j, R_j   - send step to the right and receive step from the left, j = 0 .. N-2:
//                  S_j = block (r - j),   R_j = block (r - 1 - j), placed directly in `out`.
//   gate       - S_{j+1} forwards the block R_j is receiving, up to the bytes already received,
//                so a block streams around the ring without waiting for its tail.
// Each block is written exactly once (by its receive step, or by the initial copy of `in` for
// block r) and sent only after it is written, so nothing is overwritten. Each rank receives
// every other block once: the ring is bandwidth-optimal for any distribution of sizes.
#include <cstring>
#include <string>

#include "collectives/collectives.h"
#include "collectives/pipeline.h"

namespace hvd::runtime::collectives {

Status Allgather(const Comm& comm, const void* in, void* out, const std::vector<size_t>& bytes) {
  if (comm.transport == nullptr) return InvalidArgument("allgather: no transport");
  const int n = comm.size();
  const int r = comm.rank();
  if (bytes.size() != static_cast<size_t>(n)) {
    return InvalidArgument("allgather: " + std::to_string(bytes.size()) + " byte counts for " +
                           std::to_string(n) + " ranks");
  }
  std::vector<size_t> off(n + 1, 0);
  for (int i = 0; i < n; ++i) off[i + 1] = off[i] + bytes[i];
  if (off[n] > 0 && out == nullptr) return InvalidArgument("allgather: null output buffer");
  if (bytes[r] > 0 && in == nullptr) return InvalidArgument("allgather: null input buffer");

  char* o = static_cast<char*>(out);
  if (bytes[r] > 0 && in != o + off[r]) std::memmove(o + off[r], in, bytes[r]);
  if (n == 1 || off[n] == 0) return Status::OK();

  internal::Pipeline plan;
  plan.algorithm = "ring allgather";
  plan.send_peer = (r + 1) % n;
  plan.recv_peer = (r - 1 + n) % n;
  auto block = [&](int i) { return static_cast<size_t>(((i % n) + n) % n); };
  for (int j = 0; j < n - 1; ++j) {
    const size_t s = block(r - j);
    const size_t d = block(r - 1 - j);
    plan.sends.push_back({o + off[s], bytes[s], j - 1});
    plan.recvs.push_back({o + off[d], bytes[d], /*reduce=*/false});
  }
  return internal::RunPipeline(comm, plan);
}

}  // namespace hvd::runtime::collectives
