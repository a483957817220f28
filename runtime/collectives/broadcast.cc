// Broadcast from any root: binomial tree for small messages, pipelined chain for large ones.
//
// Vocabulary (N ranks, v = (rank - root) mod N is the rank's virtual index, the root has v = 0):
//   binomial tree (n <= kTreeMaxBytes) - in round k (mask = 2^k) every v < mask that already has
//                the data sends it to v + mask. ceil(log2 N) rounds, so latency grows with
//                log N; each non-root receives once, from v minus its lowest set bit.
//   chain (larger) - virtual ranks form a line 0 -> 1 -> ... -> N-1; every rank forwards each
//                received chunk to the next as soon as it arrives (the send step is gated on the
//                receive step, see pipeline.h). Every rank receives and sends the buffer once,
//                so the time is n / bandwidth + (N-1) chunk latencies: bandwidth-optimal.
#include <string>

#include "collectives/collectives.h"
#include "collectives/pipeline.h"

namespace hvd::runtime::collectives {
namespace {

// Below this a few log2(N) latencies beat the chain's N-1 hops.
constexpr size_t kTreeMaxBytes = 64 << 10;

Status TreeBroadcast(const Comm& comm, char* buf, size_t n, int root) {
  const int size = comm.size();
  const int v = (comm.rank() - root + size) % size;
  auto real = [&](int virt) { return (virt + root) % size; };
  int mask = 1;
  while (mask < size) mask <<= 1;
  // Receive from the parent: v with its lowest set bit cleared.
  if (v != 0) {
    const int parent = real(v & (v - 1));
    const int low = v & -v;
    Status s = transport::Recv(*comm.transport, parent, buf, n, comm.idle_timeout);
    if (!s.ok()) {
      return s.WithContext("broadcast (tree, root " + std::to_string(comm.JobRank(root)) +
                           ") recv from " + internal::PeerName(comm, parent, &s));
    }
    mask = low;
  }
  // Send to the children v + m for every m below the lowest set bit (all m for the root).
  for (int m = mask >> 1; m > 0; m >>= 1) {
    if (v + m >= size) continue;
    const int child = real(v + m);
    Status s = transport::Send(*comm.transport, child, buf, n, comm.idle_timeout);
    if (!s.ok()) {
      return s.WithContext("broadcast (tree, root " + std::to_string(comm.JobRank(root)) +
                           ") send to " + internal::PeerName(comm, child, &s));
    }
  }
  return Status::OK();
}

Status ChainBroadcast(const Comm& comm, char* buf, size_t n, int root) {
  const int size = comm.size();
  const int v = (comm.rank() - root + size) % size;
  internal::Pipeline plan;
  plan.algorithm = "broadcast (chain)";
  if (v > 0) {
    plan.recv_peer = (comm.rank() - 1 + size) % size;
    plan.recvs.push_back({buf, n, /*reduce=*/false});
  }
  if (v < size - 1) {
    plan.send_peer = (comm.rank() + 1) % size;
    plan.sends.push_back({buf, n, /*gate=*/v > 0 ? 0 : -1});
  }
  return internal::RunPipeline(comm, plan);
}

}  // namespace

Status Broadcast(const Comm& comm, void* buf, size_t n, int root) {
  if (comm.transport == nullptr) return InvalidArgument("broadcast: no transport");
  if (root < 0 || root >= comm.size()) {
    return InvalidArgument("broadcast: root " + std::to_string(root) + " outside [0, " +
                           std::to_string(comm.size()) + ")");
  }
  if (comm.size() == 1 || n == 0) return Status::OK();
  if (buf == nullptr) return InvalidArgument("broadcast: null buffer");
  char* b = static_cast<char*>(buf);
  return n <= kTreeMaxBytes ? TreeBroadcast(comm, b, n, root) : ChainBroadcast(comm, b, n, root);
}

}  // namespace hvd::runtime::collectives
