// The setups the collectives suites (collectives_test.cc, collectives_failure_test.cc) run on:
// rank counts, transports (TCP on 127.0.0.1, shared memory, ranks on simulated hosts) and
// algorithm thresholds, and the communicator and transport of one rank in a setup.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <ostream>
#include <string>

#include "collectives/collectives.h"
#include "testutil/multiproc.h"

namespace hvd::runtime::collectives::test {

using transport::Transport;
using Millis = std::chrono::milliseconds;

// One point of the grid.
struct Config {
  std::string name;
  int ranks = 2;
  int hosts = 1;     // simulated hosts (HVD_HOSTNAME groups): shared memory within, TCP across
  bool shm = false;  // false: TCP between every pair
  size_t direct_max = 64 << 10;
  size_t chunk = 256 << 10;
  size_t single_copy_min = 0;  // > 0: allreduces from this size read peers' memory (Enable)
  int lookahead = 0;           // Comm::ring_lookahead_chunks (and the hierarchy's cross ring's)
  size_t stream_min = 0;       // Comm::stream_min_bytes: 1 streams wherever an algorithm may
};

inline void PrintTo(const Config& c, std::ostream* os) {
  *os << c.name << " with " << c.ranks << " ranks";
}

// The communicator of `setup` for this rank, over `t` (which must outlive it).
inline Comm MakeComm(const Config& setup, Transport* t, Millis idle_timeout) {
  Comm comm;
  comm.transport = t;
  comm.idle_timeout = idle_timeout;
  comm.direct_max_bytes = setup.direct_max;
  comm.ring_chunk_bytes = setup.chunk;
  comm.ring_lookahead_chunks = setup.lookahead;
  comm.stream_min_bytes = setup.stream_min;
  std::shared_ptr<Hierarchy> h = MakeHierarchy(
      t, hvd::testing::SplitHosts(setup.ranks, setup.hosts), setup.direct_max, setup.direct_max);
  if (h != nullptr) h->cross_ring_lookahead_chunks = setup.lookahead;
  comm.hierarchy = std::move(h);
  return comm;
}

// Makes `comm` take the single-copy allreduce as `setup` asks (collective); an error when it asks
// and a rank cannot read another's memory (testutil/cross_memory.h said it could).
inline Status EnableSingleCopyAsAsked(const Config& setup, Comm* comm) {
  if (setup.single_copy_min == 0) return Status::OK();
  std::string why_not;
  HVD_RETURN_IF_ERROR(EnableSingleCopy(comm, setup.single_copy_min, /*measure=*/false, &why_not));
  if (!why_not.empty()) return Internal("single copy refused: " + why_not);
  return Status::OK();
}

inline Status Connect(const Config& setup, int rank, const std::string& dir,
                      std::unique_ptr<Transport>* t, const std::string& scope = "default") {
  return hvd::testing::ConnectHosts(rank, setup.ranks, dir,
                                    hvd::testing::SplitHosts(setup.ranks, setup.hosts), setup.shm,
                                    t, scope);
}

}  // namespace hvd::runtime::collectives::test
