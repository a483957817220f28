// transport::Connect: one transport for a whole job, whatever its placement: shared memory
// (transport/shm) between ranks on the same host, TCP (transport/tcp) between hosts. Callers and
// collectives see one Link per peer and never need to know which kind it is; a wait over links
// of both kinds spins on the shared-memory ones and polls them all (transport/link_transport.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hvd/status.h"
#include "rendezvous/store.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace hvd::runtime::transport {

struct ConnectOptions {
  // Every rank's host name, indexed by rank: ranks with equal names share memory.
  std::vector<std::string> hosts;
  bool use_shm = true;  // false: TCP between every pair
  tcp::TcpOptions tcp;
  shm::ShmOptions shm;
};

// Connects `rank` of `size` to every peer. REQUIRES: options.hosts has `size` entries (every rank
// passes the same list).
Status Connect(rendezvous::Store& store, int rank, int size, const ConnectOptions& options,
               std::unique_ptr<Transport>* out);

// The ranks whose host name equals rank's, in rank order (rank included).
std::vector<int> SameHost(const std::vector<std::string>& hosts, int rank);

}  // namespace hvd::runtime::transport
