// Blocking Send/Recv/SendRecv/Exchange over the non-blocking Link interface.
//
// The loop moves whatever each transfer accepts, and only when none moved a byte does it block in
// WaitReady on all of them at once. The deadline restarts on every byte moved, so `idle_timeout`
// bounds how long a peer may stall, not how long a large transfer may take.
#include <string>

#include "transport/transport.h"

namespace hvd::runtime::transport {
namespace {

// Progress of one transfer.
struct Direction {
  const Transfer* what = nullptr;
  char* data = nullptr;  // what->data, or the continuation's bytes once `then` has run
  size_t bytes = 0;
  size_t done = 0;
  bool continued = false;
  Link* link = nullptr;
  bool pending() const { return done < bytes; }
  const char* verb() const { return what->send ? "send to" : "recv from"; }
};

Status Resolve(Transport& t, Direction* d) {
  d->data = static_cast<char*>(d->what->data);
  d->bytes = d->what->bytes;
  if (d->bytes == 0) {  // an empty transfer needs no peer, and is never continued
    if (d->what->then != nullptr) return InvalidArgument("a continued transfer of 0 bytes");
    return Status::OK();
  }
  const int peer = d->what->peer;
  if (peer < 0 || peer >= t.size() || peer == t.rank()) {
    return InvalidArgument(std::string(d->verb()) + " rank " + std::to_string(peer) +
                           ": not a peer of rank " + std::to_string(t.rank()) +
                           " in a communicator of size " + std::to_string(t.size()));
  }
  d->link = t.link(peer);
  return Status::OK();
}

Status IdleTimeout(std::chrono::milliseconds idle_timeout, const std::vector<Direction>& dirs) {
  std::string m = "no progress for " + std::to_string(idle_timeout.count()) + " ms: ";
  const char* sep = "";
  for (const Direction& d : dirs) {
    if (!d.pending()) continue;
    m += sep;
    m += std::string(d.verb()) + " " + d.link->description() + ": " +
         std::to_string(d.bytes - d.done) + " of " + std::to_string(d.bytes) + " bytes outstanding";
    sep = "; ";
  }
  return DeadlineExceeded(std::move(m));
}

}  // namespace

Status Exchange(Transport& t, const std::vector<Transfer>& transfers,
                std::chrono::milliseconds idle_timeout) {
  // Kept per thread between calls: a 4 KiB allreduce makes two exchanges, and allocating their
  // bookkeeping each time was a measurable share of its cost (docs/performance-api.md). Exchange is
  // never re-entered on a thread (WaitReady makes no exchange).
  thread_local std::vector<Direction> dirs;
  thread_local std::vector<WaitItem> items;
  dirs.assign(transfers.size(), Direction{});
  for (size_t i = 0; i < transfers.size(); ++i) {
    dirs[i].what = &transfers[i];
    HVD_RETURN_IF_ERROR(Resolve(t, &dirs[i]));
  }
  // Read from the clock only before a wait: most small exchanges never wait, and a clock read
  // is a measurable part of their cost. Unset (min) means "idle_timeout from now".
  Clock::time_point deadline = Clock::time_point::min();
  for (;;) {
    size_t moved_total = 0;
    bool pending = false;
    for (Direction& d : dirs) {
      if (!d.pending()) continue;
      size_t moved = 0;
      char* p = d.data + d.done;
      const size_t want = d.bytes - d.done;
      HVD_RETURN_IF_ERROR(d.what->send ? d.link->TrySend(p, want, &moved)
                                       : d.link->TryRecv(p, want, &moved));
      d.done += moved;
      moved_total += moved;
      if (!d.pending() && d.what->then != nullptr && !d.continued) {
        d.continued = true;
        void* more = nullptr;
        size_t more_bytes = 0;
        HVD_RETURN_IF_ERROR(d.what->then(d.what->context, *d.what, &more, &more_bytes));
        if (more_bytes > 0) {
          d.data = static_cast<char*>(more);
          d.bytes = more_bytes;
          d.done = 0;
        }
      }
      pending |= d.pending();
    }
    if (!pending) return Status::OK();
    if (moved_total > 0) {
      deadline = Clock::time_point::min();
      continue;
    }
    if (deadline == Clock::time_point::min()) deadline = Clock::now() + idle_timeout;
    // One wait item per link, both directions merged.
    items.clear();
    for (const Direction& d : dirs) {
      if (!d.pending()) continue;
      WaitItem* item = nullptr;
      for (WaitItem& it : items) item = it.link == d.link ? &it : item;
      if (item == nullptr) {
        items.push_back({d.link, false, false});
        item = &items.back();
      }
      (d.what->send ? item->send : item->recv) = true;
    }
    Status s = t.WaitReady(items, deadline);
    if (s.code() == StatusCode::kDeadlineExceeded) return IdleTimeout(idle_timeout, dirs);
    HVD_RETURN_IF_ERROR(s);
  }
}

Status ExchangeWithAll(Transport& t, const void* mine, size_t n, void* theirs,
                       std::chrono::milliseconds idle_timeout, Transfer::Then send_then,
                       Transfer::Then recv_then, void* context) {
  const int size = t.size(), r = t.rank();
  thread_local std::vector<Transfer> transfers;  // no allocation per round
  transfers.clear();
  for (int i = 1; i < size; ++i) {
    const int from = (r - i + size) % size;
    transfers.push_back({(r + i) % size, const_cast<void*>(mine), n, true, send_then, context});
    transfers.push_back({from, static_cast<char*>(theirs) + n * static_cast<size_t>(from), n, false,
                         recv_then, context});
  }
  return Exchange(t, transfers, idle_timeout);
}

Status SendRecv(Transport& t, int send_peer, const void* send_data, size_t send_n, int recv_peer,
                void* recv_data, size_t recv_n, std::chrono::milliseconds idle_timeout) {
  return Exchange(t,
                  {{send_peer, const_cast<void*>(send_data), send_n, true},
                   {recv_peer, recv_data, recv_n, false}},
                  idle_timeout);
}

Status Send(Transport& t, int peer, const void* data, size_t n,
            std::chrono::milliseconds idle_timeout) {
  return Exchange(t, {{peer, const_cast<void*>(data), n, true}}, idle_timeout);
}

Status Recv(Transport& t, int peer, void* data, size_t n, std::chrono::milliseconds idle_timeout) {
  return Exchange(t, {{peer, data, n, false}}, idle_timeout);
}

}  // namespace hvd::runtime::transport
