#include "negotiation/exchange.h"

#include "collectives/pipeline.h"
#include "transport/transport.h"

namespace hvd::runtime::negotiation {

using transport::Recv;
using transport::Send;

Status AndAllreduce(const collectives::Comm& comm, std::vector<uint64_t>* bits) {
  const int n = comm.size();
  if (n == 1) return Status::OK();
  const size_t bytes = bits->size() * sizeof(uint64_t);
  if (n <= kDirectAndMaxRanks) {
    // Every rank sends its bits to every other in one round and ANDs what it receives: one
    // message latency, against two for the star below (to rank 0, then back).
    const int r = comm.rank();
    auto* theirs = reinterpret_cast<uint64_t*>(collectives::internal::ThreadScratch(
        collectives::internal::Scratch::kGather, bytes * static_cast<size_t>(n)));
    Status s =
        transport::ExchangeWithAll(*comm.transport, bits->data(), bytes, theirs, comm.idle_timeout);
    if (!s.ok()) return s.WithContext("negotiation: exchanging the ready bits");
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      const uint64_t* t = theirs + static_cast<size_t>(p) * bits->size();
      for (size_t k = 0; k < bits->size(); ++k) (*bits)[k] &= t[k];
    }
    return Status::OK();
  }
  if (comm.rank() == 0) {
    std::vector<uint64_t> theirs(bits->size());
    for (int r = 1; r < comm.size(); ++r) {
      // Peers are named by job rank (PeerName): on a process set's view, r is a set rank.
      Status s = Recv(*comm.transport, r, theirs.data(), bytes, comm.idle_timeout);
      if (!s.ok()) {
        return s.WithContext("negotiation: receiving the ready bits of " +
                             collectives::internal::PeerName(comm, r, &s));
      }
      for (size_t i = 0; i < bits->size(); ++i) (*bits)[i] &= theirs[i];
    }
  } else {
    Status s = Send(*comm.transport, 0, bits->data(), bytes, comm.idle_timeout);
    if (!s.ok()) {
      return s.WithContext("negotiation: sending the ready bits to " +
                           collectives::internal::PeerName(comm, 0, &s));
    }
  }
  return collectives::Broadcast(comm, bits->data(), bytes, 0)
      .WithContext("negotiation: broadcasting the agreed ready bits");
}

Status GatherToRoot(const collectives::Comm& comm, const std::string& mine,
                    std::vector<std::string>* all) {
  if (comm.rank() != 0) {
    uint64_t n = mine.size();
    Status s = Send(*comm.transport, 0, &n, sizeof n, comm.idle_timeout);
    if (s.ok()) s = Send(*comm.transport, 0, mine.data(), n, comm.idle_timeout);
    if (!s.ok()) {
      return s.WithContext("negotiation: sending requests to " +
                           collectives::internal::PeerName(comm, 0, &s));
    }
    return Status::OK();
  }
  all->assign(comm.size(), std::string());
  (*all)[0] = mine;
  for (int r = 1; r < comm.size(); ++r) {
    uint64_t n = 0;
    auto ctx = [&](const Status* s) {
      return "negotiation: receiving requests from " + collectives::internal::PeerName(comm, r, s);
    };
    Status s = Recv(*comm.transport, r, &n, sizeof n, comm.idle_timeout);
    if (!s.ok()) return s.WithContext(ctx(&s));
    if (n > (1ull << 32))
      return Internal(ctx(nullptr) + ": implausible message length " + std::to_string(n));
    (*all)[r].resize(n);
    s = Recv(*comm.transport, r, (*all)[r].data(), n, comm.idle_timeout);
    if (!s.ok()) return s.WithContext(ctx(&s));
  }
  return Status::OK();
}

Status BroadcastFromRoot(const collectives::Comm& comm, std::string* message) {
  if (comm.size() == 1) return Status::OK();
  uint64_t n = message->size();
  HVD_RETURN_IF_ERROR_CTX(collectives::Broadcast(comm, &n, sizeof n, 0),
                          "negotiation: broadcasting responses");
  message->resize(n);
  return collectives::Broadcast(comm, message->data(), n, 0)
      .WithContext("negotiation: broadcasting responses");
}

}  // namespace hvd::runtime::negotiation
