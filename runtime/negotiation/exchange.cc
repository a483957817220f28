#include "negotiation/exchange.h"

#include <cstring>

#include "collectives/pipeline.h"
#include "transport/transport.h"

namespace hvd::runtime::negotiation {

using transport::Recv;
using transport::Send;

namespace {

// The direct exchange's message: the bits, one word describing the rider (tag | bytes << 32),
// then the rider's bytes, if any.
struct RiderExchange {
  const collectives::Comm* comm;
  const Rider* mine;
  Riders* theirs;
  size_t header_bytes;
};

Status SendRider(void* context, const transport::Transfer&, void** more, size_t* bytes) {
  const auto* x = static_cast<RiderExchange*>(context);
  if (x->mine != nullptr && x->mine->tag != 0) {
    *more = const_cast<void*>(x->mine->data);
    *bytes = x->mine->bytes;
  }
  return Status::OK();
}

// Every peer's rider is received, whether or not this rank looks at it: the bytes are on the
// link.
Status RecvRider(void* context, const transport::Transfer& done, void** more, size_t* bytes) {
  const auto* x = static_cast<RiderExchange*>(context);
  uint64_t word;
  std::memcpy(&word, static_cast<const char*>(done.data) + x->header_bytes - sizeof word,
              sizeof word);
  const Rider rider{static_cast<uint32_t>(word), static_cast<uint32_t>(word >> 32), nullptr};
  if (rider.tag == 0) return Status::OK();
  if (rider.bytes == 0 || rider.bytes > kMaxRiderBytes) {
    return Internal(
        "negotiation: " + collectives::internal::PeerName(*x->comm, done.peer) + " sent " +
        std::to_string(rider.bytes) + " bytes of data with its ready bits; a rank accepts 1 to " +
        std::to_string(kMaxRiderBytes) + " (are all ranks running the same hvd build?)");
  }
  const size_t n = static_cast<size_t>(x->comm->size());
  char* base = collectives::internal::ThreadScratch(collectives::internal::Scratch::kRider,
                                                    kMaxRiderBytes * n);
  *more = base + kMaxRiderBytes * static_cast<size_t>(done.peer);
  *bytes = rider.bytes;
  if (x->theirs != nullptr) {
    x->theirs->base = base;
    x->theirs->from[done.peer] = {rider.tag, rider.bytes, *more};
  }
  return Status::OK();
}

}  // namespace

Status AndAllreduce(const collectives::Comm& comm, std::vector<uint64_t>* bits, const Rider* mine,
                    Riders* theirs) {
  const int n = comm.size();
  if (theirs != nullptr) {
    theirs->from.assign(static_cast<size_t>(n), Rider{});
    theirs->base = nullptr;
    if (mine != nullptr) theirs->from[comm.rank()] = *mine;
  }
  if (n == 1) return Status::OK();
  const size_t bytes = bits->size() * sizeof(uint64_t);
  if (n <= kDirectAndMaxRanks) {
    // Every rank sends its bits to every other in one round and ANDs what it receives: one
    // message latency, against two for the star below (to rank 0, then back).
    const int r = comm.rank();
    const size_t words = bits->size() + 1;
    thread_local std::vector<uint64_t> header;  // no allocation per round
    header.assign(bits->begin(), bits->end());
    header.push_back(mine != nullptr && mine->tag != 0
                         ? mine->tag | static_cast<uint64_t>(mine->bytes) << 32
                         : 0);
    auto* all = reinterpret_cast<uint64_t*>(collectives::internal::ThreadScratch(
        collectives::internal::Scratch::kGather, words * sizeof(uint64_t) * n));
    RiderExchange x{&comm, mine, theirs, words * sizeof(uint64_t)};
    Status s = transport::ExchangeWithAll(*comm.transport, header.data(), x.header_bytes, all,
                                          comm.idle_timeout, SendRider, RecvRider, &x);
    if (!s.ok()) return s.WithContext("negotiation: exchanging the ready bits");
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      const uint64_t* t = all + static_cast<size_t>(p) * words;
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
