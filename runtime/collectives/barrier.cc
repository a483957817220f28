// Barrier by dissemination.
//
// Vocabulary (N ranks, this rank r):
//   round k (k = 0 .. ceil(log2 N) - 1) - send one byte to (r + 2^k) mod N and receive one byte
//                from (r - 2^k) mod N. After round k a rank has heard, directly or transitively,
//                from the 2^(k+1) ranks before it; after the last round, from everyone, so no rank
//                leaves before every rank has entered.
//   token      - the byte carries k, so a desynchronized stream (a rank in a different
//                collective) is reported instead of silently passing.
// Links are ordered per direction and each round consumes exactly the byte sent to it, so rounds
// (and successive barriers) never mix even when two rounds use the same link.
#include <cstdint>
#include <string>

#include "collectives/collectives.h"
#include "collectives/pipeline.h"

namespace hvd::runtime::collectives {

Status Barrier(const Comm& comm) {
  if (comm.transport == nullptr) return InvalidArgument("barrier: no transport");
  const int n = comm.size();
  const int r = comm.rank();
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  for (int k = 0; k < rounds; ++k) {
    const int to = (r + (1 << k)) % n;
    const int from = (r - (1 << k) % n + n) % n;
    const uint8_t token = static_cast<uint8_t>(k);
    uint8_t got = 0;
    auto context = [&](const Status* s) {
      return "barrier round " + std::to_string(k + 1) + "/" + std::to_string(rounds) +
             ": send to " + internal::PeerName(comm, to, s) + ", recv from " +
             internal::PeerName(comm, from, s);
    };
    Status s =
        transport::SendRecv(*comm.transport, to, &token, 1, from, &got, 1, comm.idle_timeout);
    if (!s.ok()) return s.WithContext(context(&s));
    if (got != token) {
      return Internal(context(nullptr) + ": expected token " + std::to_string(token) + ", got " +
                      std::to_string(got) + " (ranks are running different collectives)");
    }
  }
  return Status::OK();
}

}  // namespace hvd::runtime::collectives
