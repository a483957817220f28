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
  // Every rank's host name, indexed by rank: ranks with equal names may share memory, and do when
  // their shared-memory identities (below) are equal too.
  std::vector<std::string> hosts;
  bool use_shm = true;  // false: TCP between every pair
  // What decides whether two processes can really share memory; empty: LocalShmIdentity().
  std::string shm_identity;
  tcp::TcpOptions tcp;
  shm::ShmOptions shm;
};

// Connects `rank` of `size` to every peer. REQUIRES: options.hosts has `size` entries (every rank
// passes the same list).
Status Connect(rendezvous::Store& store, int rank, int size, const ConnectOptions& options,
               std::unique_ptr<Transport>* out);

// The ranks whose host name equals rank's, in rank order (rank included).
std::vector<int> SameHost(const std::vector<std::string>& hosts, int rank);

// A host name is only a claim: agents in different network namespaces (containers, pods) or on
// different machines can carry the same one, and their ranks would then dial each other's
// abstract AF_UNIX sockets in vain ("connect to rank 0 at @hvd-shm/...: Connection refused").
// This identity is what shared memory really needs: the same kernel (boot id), the same IPC and
// network namespaces (the shm mesh's sockets live in the network namespace's abstract space).
// "boot=<boot_id> ipc=ipc:[N] net=net:[N]". The environment variable HVD_TEST_SHM_IDENTITY, when
// set, replaces it: test-only, for faking ranks in other namespaces without creating any.
std::string LocalShmIdentity();

// The ranks among `same_host` (SameHost's answer for `rank`) whose identity equals rank's, in
// rank order. `identities` is indexed like `same_host`. Pure; every rank of the group computes
// the same partition from the same inputs.
std::vector<int> SameIdentity(const std::vector<int>& same_host,
                              const std::vector<std::string>& identities, int rank);

}  // namespace hvd::runtime::transport
