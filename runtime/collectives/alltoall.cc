// Alltoall by pairwise exchange.
//
// Vocabulary (N ranks, this rank r):
//   step i (1 <= i < N) - send the block for rank (r + i) mod N and receive the block from rank
//                (r - i) mod N, concurrently (transport::SendRecv). At every step each rank sends
//                to exactly one peer and receives from exactly one, so no link is oversubscribed,
//                and the steps run in the same order everywhere, so they pair up without tags.
//   self block - copied locally first.
// Blocks may be any size, including 0. A direction with 0 bytes needs nothing from its partner,
// so a step where both directions are empty is skipped. Sizes must agree pairwise (send_bytes[p]
// on rank r == recv_bytes[r] on rank p); the streams carry no headers to check it.
#include <cstring>
#include <string>

#include "collectives/collectives.h"
#include "collectives/pipeline.h"

namespace hvd::runtime::collectives {

Status Alltoall(const Comm& comm, const void* in, const std::vector<size_t>& send_bytes, void* out,
                const std::vector<size_t>& recv_bytes) {
  if (comm.transport == nullptr) return InvalidArgument("alltoall: no transport");
  const int n = comm.size();
  const int r = comm.rank();
  if (send_bytes.size() != static_cast<size_t>(n) || recv_bytes.size() != static_cast<size_t>(n)) {
    return InvalidArgument("alltoall: " + std::to_string(send_bytes.size()) + " send and " +
                           std::to_string(recv_bytes.size()) + " receive sizes for " +
                           std::to_string(n) + " ranks");
  }
  if (send_bytes[r] != recv_bytes[r]) {
    return InvalidArgument("alltoall: rank " + std::to_string(r) + " sends itself " +
                           std::to_string(send_bytes[r]) + " bytes but expects " +
                           std::to_string(recv_bytes[r]));
  }
  std::vector<size_t> soff(n + 1, 0), roff(n + 1, 0);
  for (int p = 0; p < n; ++p) {
    soff[p + 1] = soff[p] + send_bytes[p];
    roff[p + 1] = roff[p] + recv_bytes[p];
  }
  if ((soff[n] > 0 && in == nullptr) || (roff[n] > 0 && out == nullptr)) {
    return InvalidArgument("alltoall: null buffer");
  }
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  if (send_bytes[r] > 0) std::memmove(dst + roff[r], src + soff[r], send_bytes[r]);

  for (int i = 1; i < n; ++i) {
    const int to = (r + i) % n;
    const int from = (r - i + n) % n;
    if (send_bytes[to] == 0 && recv_bytes[from] == 0) continue;
    Status s = transport::SendRecv(*comm.transport, to, src + soff[to], send_bytes[to], from,
                                   dst + roff[from], recv_bytes[from], comm.idle_timeout);
    if (!s.ok()) {
      return s.WithContext("alltoall step " + std::to_string(i) + "/" + std::to_string(n - 1) +
                           ": send to " + internal::PeerName(comm, to, &s) + ", recv from " +
                           internal::PeerName(comm, from, &s));
    }
  }
  return Status::OK();
}

}  // namespace hvd::runtime::collectives
