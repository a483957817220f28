// The TCP transport: a full mesh of TCP connections between the ranks of one communicator,
// set up through a rendezvous Store.
//
// Setup: every rank listens on `bind_addr` (ephemeral port unless `port` is set), publishes
// "<scope>/tcp/<rank>" = "host:port", then connects to every lower rank (retrying with backoff
// while the address is missing or refuses) and, at the same time, accepts every higher one. Each
// connection starts with a handshake both ways (magic, version, rank, size, scope hash, listen
// port; transport/tcp/handshake.h) so a stray or stale connection is refused with a message.
// Sockets are IPv4, non-blocking, close-on-exec, TCP_NODELAY; sends use MSG_NOSIGNAL (EPIPE, never
// SIGPIPE).
//
// At run time: WaitReady is one poll(2) over the items' sockets plus an eventfd that Abort()
// signals (transport/link_transport.h), so Abort from any thread wakes a blocked wait at once.
// Abort also shuts every socket down, so peers blocked on this rank see "closed the connection"
// instead of waiting out their idle timeouts.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "hvd/status.h"
#include "rendezvous/store.h"
#include "transport/link_transport.h"
#include "transport/transport.h"

namespace hvd::runtime::transport::tcp {

struct TcpOptions {
  std::string bind_addr = "127.0.0.1";  // IPv4 address to listen on
  std::string advertise_addr;           // address peers dial; empty: bind_addr (host name if
                                        // bind_addr is 0.0.0.0)
  int port = 0;                         // 0: ephemeral
  std::string scope = "default";        // key prefix in the store; isolates communicators
  std::chrono::milliseconds connect_timeout{30000};
  int socket_buffer_bytes = 0;  // SO_SNDBUF/SO_RCVBUF; 0 leaves the kernel's autotuning on
};

// Creates the mesh for `rank` of `size`. DeadlineExceeded (after connect_timeout) lists the ranks
// that never published their address and those that published but never connected.
// FailedPrecondition when a peer refuses our handshake or answers with a mismatched one (size,
// scope, rank): a configuration error that retrying cannot fix.
Status Connect(rendezvous::Store& store, int rank, int size, const TcpOptions& options,
               std::unique_ptr<Transport>* out);

// The mesh's links to the peers p with peers[p] set (every peer when `peers` is empty), sharing
// `abort`, for a transport that mixes kinds of links (transport/connect.h); (*links)[p] stays
// null for the others. Errors as for Connect.
Status ConnectLinks(rendezvous::Store& store, int rank, int size, const TcpOptions& options,
                    const std::vector<bool>& peers, std::shared_ptr<AbortState> abort,
                    std::vector<std::unique_ptr<PollableLink>>* links);

}  // namespace hvd::runtime::transport::tcp
