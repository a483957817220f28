// Blocking Send/Recv/SendRecv over the non-blocking Link interface.
//
// The loop moves whatever each direction accepts, and only when neither moved a byte does it block
// in WaitReady. The deadline restarts on every byte moved, so `idle_timeout` bounds how long a peer
// may stall, not how long a large transfer may take.
#include <string>

#include "transport/transport.h"

namespace hvd::runtime::transport {
namespace {

// Progress of one direction of a SendRecv.
struct Direction {
  const char* verb;  // "send to" / "recv from"
  int peer;
  size_t n;
  size_t done = 0;
  Link* link = nullptr;
  bool pending() const { return done < n; }
};

Status Resolve(Transport& t, Direction* d) {
  if (d->n == 0) return Status::OK();  // an empty direction needs no peer
  if (d->peer < 0 || d->peer >= t.size() || d->peer == t.rank()) {
    return InvalidArgument(std::string(d->verb) + " rank " + std::to_string(d->peer) +
                           ": not a peer of rank " + std::to_string(t.rank()) +
                           " in a communicator of size " + std::to_string(t.size()));
  }
  d->link = t.link(d->peer);
  return Status::OK();
}

std::string Outstanding(const Direction& d) {
  return std::string(d.verb) + " " + d.link->description() + ": " + std::to_string(d.n - d.done) +
         " of " + std::to_string(d.n) + " bytes outstanding";
}

Status IdleTimeout(std::chrono::milliseconds idle_timeout, const Direction& send,
                   const Direction& recv) {
  std::string m = "no progress for " + std::to_string(idle_timeout.count()) + " ms: ";
  if (send.pending()) m += Outstanding(send);
  if (send.pending() && recv.pending()) m += "; ";
  if (recv.pending()) m += Outstanding(recv);
  return DeadlineExceeded(std::move(m));
}

}  // namespace

Status SendRecv(Transport& t, int send_peer, const void* send_data, size_t send_n, int recv_peer,
                void* recv_data, size_t recv_n, std::chrono::milliseconds idle_timeout) {
  Direction send{"send to", send_peer, send_n};
  Direction recv{"recv from", recv_peer, recv_n};
  HVD_RETURN_IF_ERROR(Resolve(t, &send));
  HVD_RETURN_IF_ERROR(Resolve(t, &recv));
  const char* out = static_cast<const char*>(send_data);
  char* in = static_cast<char*>(recv_data);
  Clock::time_point deadline = Clock::now() + idle_timeout;
  std::vector<WaitItem> items;
  while (send.pending() || recv.pending()) {
    size_t sent = 0, received = 0;
    if (send.pending()) {
      HVD_RETURN_IF_ERROR(send.link->TrySend(out + send.done, send.n - send.done, &sent));
      send.done += sent;
    }
    if (recv.pending()) {
      HVD_RETURN_IF_ERROR(recv.link->TryRecv(in + recv.done, recv.n - recv.done, &received));
      recv.done += received;
    }
    if (sent + received > 0) {
      deadline = Clock::now() + idle_timeout;
      continue;
    }
    items.clear();
    if (send.pending() && recv.pending() && send.link == recv.link) {
      items.push_back({send.link, true, true});
    } else {
      if (send.pending()) items.push_back({send.link, true, false});
      if (recv.pending()) items.push_back({recv.link, false, true});
    }
    Status s = t.WaitReady(items, deadline);
    if (s.code() == StatusCode::kDeadlineExceeded) return IdleTimeout(idle_timeout, send, recv);
    HVD_RETURN_IF_ERROR(s);
  }
  return Status::OK();
}

Status Send(Transport& t, int peer, const void* data, size_t n,
            std::chrono::milliseconds idle_timeout) {
  return SendRecv(t, peer, data, n, peer, nullptr, 0, idle_timeout);
}

Status Recv(Transport& t, int peer, void* data, size_t n, std::chrono::milliseconds idle_timeout) {
  return SendRecv(t, peer, nullptr, 0, peer, data, n, idle_timeout);
}

}  // namespace hvd::runtime::transport
