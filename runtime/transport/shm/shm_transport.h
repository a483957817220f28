// The shared-memory transport: byte streams between ranks of the same host through rings in
// memfd segments, set up through a rendezvous Store.
//
// Setup: each local rank creates its segment (transport/shm/segment.h), a doorbell eventfd and a
// listening AF_UNIX SOCK_SEQPACKET socket in the abstract namespace (nothing in the filesystem to
// clean up), and publishes "<scope>/shm/<rank>" = the socket's name. It then sends a hello (rank,
// size, scope hash, ring size) with its segment and doorbell fds (SCM_RIGHTS) to every lower
// local rank, answers every higher one the same way, and reads the lower ranks' answers. Sending
// needs only the peer's listen backlog, so no rank waits on another's progress and the mesh
// cannot deadlock. The connected socket stays open as the liveness fd: when a peer process dies,
// for whatever reason, the kernel closes its end and our poll(2) sees POLLHUP.
//
// At run time (transport/shm/shm_link.h): TrySend copies into the peer's ring, TryRecv copies out;
// neither makes a system call unless the other side sleeps. WaitReady spins on the ring indices
// for `spin`, yielding the CPU, then sleeps in poll(2) on this rank's doorbell, the peers'
// liveness fds and the abort eventfd. Abort raises the segment's closed flag and shuts the
// liveness sockets down, so peers blocked on this rank fail at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "hvd/status.h"
#include "rendezvous/store.h"
#include "transport/link_transport.h"
#include "transport/transport.h"

namespace hvd::runtime::transport::shm {

struct ShmOptions {
  std::string scope = "default";  // key prefix in the store; isolates communicators
  std::chrono::milliseconds connect_timeout{30000};
  size_t ring_bytes = size_t{1} << 20;  // per direction and peer; a power of two >= 4096
  std::chrono::microseconds spin{100};  // WaitReady spins this long before sleeping
};

// Creates the shared-memory mesh for `rank` of `size`; every rank must be on this host.
// DeadlineExceeded (after connect_timeout) names the ranks that never published their socket and
// those that never answered.
Status Connect(rendezvous::Store& store, int rank, int size, const ShmOptions& options,
               std::unique_ptr<Transport>* out);

// The mesh's links among the ranks `local` (sorted global ranks on this host, including `rank`),
// sharing `abort`, for a transport that mixes kinds of links (transport/connect.h);
// (*links)[p] stays null for ranks not in `local`.
Status ConnectLinks(rendezvous::Store& store, int rank, int size, const std::vector<int>& local,
                    const ShmOptions& options, std::shared_ptr<AbortState> abort,
                    std::vector<std::unique_ptr<PollableLink>>* links);

}  // namespace hvd::runtime::transport::shm
