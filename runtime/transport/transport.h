// Transport: reliable, ordered byte streams between the ranks of one communicator.
//
// Vocabulary:
//   link      - the stream between this rank and one peer (full duplex). Sends and receives on a
//               link never block: they move what the OS (or shared memory) accepts right now and
//               report how much; algorithms drive several links at once and overlap I/O with
//               reductions (see collectives/ring_allreduce.cc).
//   wait      - Transport::WaitReady blocks until one of a set of link directions can move bytes,
//               or the deadline passes.
//   abort     - Transport::Abort makes every blocked or later operation fail at once with a
//               reason; used on shutdown and when a peer is known to be dead.
//
// The collectives never know which transport runs: TCP (transport/tcp), shared memory between
// ranks of one host (transport/shm), or both in one job (transport/connect.h). Every error names
// the peer: rank, host:port or shared-memory segment, the syscall and errno.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "hvd/status.h"

namespace hvd::runtime::transport {

using Clock = std::chrono::steady_clock;

class Link {
 public:
  Link() = default;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;
  virtual ~Link() = default;

  virtual int peer() const = 0;
  // "rank 2 (127.0.0.1:40113)", used in every error about this link.
  virtual const std::string& description() const = 0;

  // Moves up to `n` bytes without blocking; *moved gets the count (0 when it would block).
  // Unavailable, naming the peer, when the peer closed the stream or the connection broke.
  virtual Status TrySend(const void* data, size_t n, size_t* moved) = 0;
  virtual Status TryRecv(void* data, size_t n, size_t* moved) = 0;

  // Zero-copy access, for links whose buffers this process can address (shared memory); the
  // defaults (TCP) offer none, and callers fall back to TrySend/TryRecv, which also report errors.
  // PeekRecv points *data at received, unconsumed bytes lying contiguously in the link's buffer
  // and returns how many (at most n; 0 when none now). ConsumeRecv(k) releases the first k of
  // them. PeekSend points *space at contiguous free space for outgoing bytes (at most n);
  // CommitSend(k) sends the first k bytes written there. Pointers may have any alignment and are
  // valid until the matching Consume/Commit.
  virtual size_t PeekRecv(size_t n, const void** data) { return 0; }
  virtual void ConsumeRecv(size_t k) {}
  virtual size_t PeekSend(size_t n, void** space) { return 0; }
  virtual void CommitSend(size_t k) {}

  // The peer's process id, as this process names it, when the peer runs on this host and its
  // memory could be read with process_vm_readv (shared-memory links; whether the kernel allows
  // it is another matter: collectives/single_copy_allreduce.cc probes); 0 when the peer is on this
  // host but in another pid namespace (its pid cannot be named here); -1 otherwise (TCP).
  virtual int peer_pid() const { return -1; }
};

struct WaitItem {
  Link* link = nullptr;
  bool send = false;  // wake when `link` can accept bytes
  bool recv = false;  // wake when `link` has bytes (or an error/EOF) to read
};

class Transport {
 public:
  Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // REQUIRES: 0 <= peer < size(), peer != rank().
  virtual Link* link(int peer) = 0;

  // Blocks until at least one item can make progress, or `deadline`. DeadlineExceeded names the
  // peers waited on. Returns at once with the abort reason after Abort().
  virtual Status WaitReady(const std::vector<WaitItem>& items, Clock::time_point deadline) = 0;

  // Fails every blocked and future operation with Aborted(reason). Thread-safe; idempotent.
  virtual void Abort(const std::string& reason) = 0;
};

// While an instance lives, WaitReady calls made on this thread sleep at once instead of spinning
// first. For waits that are expected to be long and idle (a rank with no work of its own waiting
// for ranks that have some): on a host with more ranks than cores, spinning there only takes CPU
// from the ranks doing the work. Nests; restores the previous state.
class ScopedPatientWaits {
 public:
  explicit ScopedPatientWaits(bool patient = true);
  ~ScopedPatientWaits();
  ScopedPatientWaits(const ScopedPatientWaits&) = delete;
  ScopedPatientWaits& operator=(const ScopedPatientWaits&) = delete;

  // Whether waits on this thread are patient now (for transports' WaitReady).
  static bool Active();

 private:
  const bool previous_;
};

// While an instance lives (n > 0), WaitReady calls on this thread spin as they would if `n`
// ranks shared this host's CPUs, instead of the job's count of ranks on the host. A process set
// waits among its own members: in a set of two on a host of four ranks (two cores), the other
// two are not this wait's business, and pausing before yielding wakes sooner. Nests.
class ScopedSpinRanks {
 public:
  explicit ScopedSpinRanks(int n);
  ~ScopedSpinRanks();
  ScopedSpinRanks(const ScopedSpinRanks&) = delete;
  ScopedSpinRanks& operator=(const ScopedSpinRanks&) = delete;

 private:
  const int previous_;
};

// Blocking helpers over any Transport. `idle_timeout` bounds the time without any progress (a
// large transfer may take longer in total); on expiry the error names the peer and the bytes
// still outstanding.
Status Send(Transport& t, int peer, const void* data, size_t n,
            std::chrono::milliseconds idle_timeout);
Status Recv(Transport& t, int peer, void* data, size_t n, std::chrono::milliseconds idle_timeout);
// Sends to `send_peer` and receives from `recv_peer` concurrently (either may equal the other).
Status SendRecv(Transport& t, int send_peer, const void* send_data, size_t send_n, int recv_peer,
                void* recv_data, size_t recv_n, std::chrono::milliseconds idle_timeout);

// One blocking transfer of Exchange: `bytes` from `data` to `peer` (send) or from `peer` into
// `data`. A transfer of 0 bytes needs no peer.
struct Transfer {
  int peer = -1;
  void* data = nullptr;  // read when sending
  size_t bytes = 0;
  bool send = false;
  // Optional: called once when `bytes` have moved, to go on with `*more_bytes` more at
  // `*more_data` on the same link in the same exchange (0: done). A message whose length its
  // first bytes give (a header, then its payload) then costs one message latency, not two.
  // An error fails the exchange. REQUIRES: bytes > 0 where set.
  using Then = Status (*)(void* context, const Transfer& done, void** more_data,
                          size_t* more_bytes);
  Then then = nullptr;
  void* context = nullptr;
};
// Runs every transfer concurrently, so a rank can talk to many peers in one round trip. At most
// one send and one receive per peer: a link carries one ordered stream each way.
Status Exchange(Transport& t, const std::vector<Transfer>& transfers,
                std::chrono::milliseconds idle_timeout);

// One round with every other rank at once: sends the `n` bytes at `mine` to each peer and
// receives peer p's `n` bytes at theirs + n x p (this rank's slot is left alone). The latency
// paths' exchange (ready bits, the direct allreduce, the single copy's hellos). `send_then` and
// `recv_then` (with `context`), when set, continue every send and every receive (Transfer::then).
// REQUIRES: n > 0 where a continuation is set.
Status ExchangeWithAll(Transport& t, const void* mine, size_t n, void* theirs,
                       std::chrono::milliseconds idle_timeout, Transfer::Then send_then = nullptr,
                       Transfer::Then recv_then = nullptr, void* context = nullptr);

}  // namespace hvd::runtime::transport
