#include "core/control.h"

#include "transport/transport.h"

namespace hvd::runtime::core {

using transport::Recv;
using transport::Send;

Status AndAllreduce(const collectives::Comm& comm, std::vector<uint64_t>* bits) {
  if (comm.size() == 1) return Status::OK();
  const size_t bytes = bits->size() * sizeof(uint64_t);
  if (comm.rank() == 0) {
    std::vector<uint64_t> theirs(bits->size());
    for (int r = 1; r < comm.size(); ++r) {
      HVD_RETURN_IF_ERROR_CTX(Recv(*comm.transport, r, theirs.data(), bytes, comm.idle_timeout),
                              "negotiation: receiving the ready bits of rank " + std::to_string(r));
      for (size_t i = 0; i < bits->size(); ++i) (*bits)[i] &= theirs[i];
    }
  } else {
    HVD_RETURN_IF_ERROR_CTX(Send(*comm.transport, 0, bits->data(), bytes, comm.idle_timeout),
                            "negotiation: sending the ready bits to rank 0");
  }
  return collectives::Broadcast(comm, bits->data(), bytes, 0)
      .WithContext("negotiation: broadcasting the agreed ready bits");
}

Status GatherToRoot(const collectives::Comm& comm, const std::string& mine,
                    std::vector<std::string>* all) {
  if (comm.rank() != 0) {
    uint64_t n = mine.size();
    HVD_RETURN_IF_ERROR_CTX(Send(*comm.transport, 0, &n, sizeof n, comm.idle_timeout),
                            "negotiation: sending requests to rank 0");
    return Send(*comm.transport, 0, mine.data(), n, comm.idle_timeout)
        .WithContext("negotiation: sending requests to rank 0");
  }
  all->assign(comm.size(), std::string());
  (*all)[0] = mine;
  for (int r = 1; r < comm.size(); ++r) {
    uint64_t n = 0;
    const std::string ctx = "negotiation: receiving requests from rank " + std::to_string(r);
    HVD_RETURN_IF_ERROR_CTX(Recv(*comm.transport, r, &n, sizeof n, comm.idle_timeout), ctx);
    if (n > (1ull << 32))
      return Internal(ctx + ": implausible message length " + std::to_string(n));
    (*all)[r].resize(n);
    HVD_RETURN_IF_ERROR_CTX(Recv(*comm.transport, r, (*all)[r].data(), n, comm.idle_timeout), ctx);
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

}  // namespace hvd::runtime::core
