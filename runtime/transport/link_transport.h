// The Transport over per-peer links of any kind (TCP sockets, shared-memory rings, both in one
// job), and what a link does to be waited on next to links of other kinds. Internal to
// transport/; backends build links, tcp::Connect, shm::Connect and transport::Connect wrap them.
//
// Vocabulary:
//   ready now - a direction whose next TrySend/TryRecv would move bytes or report an error, known
//               without a system call (shared memory: the ring's indices). A TCP link never knows
//               without poll(2), so it is never ready now.
//   arm       - prepare to sleep: a link appends the fds poll(2) must watch for it and asks its
//               peer to signal them (shared memory: raises a waiting flag in the segment, so the
//               peer writes this rank's doorbell eventfd when it moves the ring's index).
//   disarm    - after poll(2): lower the flags, drain the doorbell, note a peer found dead.
//   spin      - WaitReady first re-checks "ready now" for up to SpinPolicy::spin when any waited
//               link can be ready now: a peer on another core usually answers within
//               microseconds, sooner than a sleep and a wake-up take. The first SpinPolicy::pause
//               of it polls with pause instructions; the rest yields the CPU between polls.
//               Without a pause (more local ranks than CPUs) it yields from the first poll. A
//               rank publishes its CPU as a wait starts and ends (where it goes on running);
//               a peer found on the waiting thread's own CPU cannot answer before that thread
//               gives the CPU up: then the wait yields from the start (pausing there cost every
//               hand-off the whole pause: 4 KiB allreduce 15.8 us instead of 5.0 with both ranks
//               on one vCPU of two), and where every local rank could have a CPU of its own the
//               higher rank of the two moves to an allowed CPU no local peer has published
//               (move_off_cpu.h).
// WaitReady = spin, then arm every item, re-check "ready now" (a signal sent between the check
// and the arming is not lost: the flag is raised before the re-check), poll(2) over the armed fds
// and the abort eventfd, disarm.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "transport/transport.h"

namespace hvd::runtime::transport {

// Shared by a transport and its links so every operation sees Abort() at once.
class AbortState {
 public:
  AbortState();  // creates the eventfd
  ~AbortState();
  AbortState(const AbortState&) = delete;
  AbortState& operator=(const AbortState&) = delete;

  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // Aborted(reason); only meaningful once aborted() is true.
  Status status() const;
  // Records `reason` (first call wins) and makes wake_fd() readable forever. False when already
  // aborted.
  bool Abort(const std::string& reason);
  // Readable once aborted: WaitReady polls it next to the links' fds.
  int wake_fd() const { return wake_fd_; }

 private:
  std::atomic<bool> aborted_{false};
  mutable base::Mutex mu_;
  std::string reason_ HVD_GUARDED_BY(mu_);
  int wake_fd_ = -1;
};

class PollableLink : public Link {
 public:
  // See "ready now" above. Cheap: called in a spin loop.
  virtual bool ReadyNow(bool send, bool recv) { return false; }
  // Whether ReadyNow can ever be true (worth spinning on).
  virtual bool CanSpin() const { return false; }
  // Publishes the CPU this rank's waiting thread runs on (shared memory: in this rank's segment,
  // which all its links share), and reads what the peer published (-1: nothing; see "spin").
  // Cheap: called by every spinning wait.
  virtual void NoteCpu(int cpu) {}
  virtual int PeerCpu() const { return -1; }
  // Appends the fds to poll for these directions; returns how many (see "arm").
  virtual size_t Arm(bool send, bool recv, std::vector<pollfd>* fds) = 0;
  // After poll(2): `fds` are the entries this link's Arm appended, with their revents.
  virtual void Disarm(bool send, bool recv, const pollfd* fds) {}
  // Transport::Abort: makes the peer see this link close at once (it stops waiting on us).
  virtual void Shutdown() = 0;
};

struct SpinPolicy {
  std::chrono::microseconds spin{0};   // how long WaitReady polls ready-now links before sleeping
  std::chrono::microseconds pause{0};  // the first part of it, without yielding the CPU
  size_t cpus = 1;                     // CPUs this process may run on (ScopedSpinRanks)
};

// The policy for `local_ranks` processes sharing this host's CPUs: pause-polling only when every
// one of them can have a CPU of its own (else the peer we wait for may need ours), and then for
// at most 10 us, so that a yield does not hand the core to an unrelated process for a slice.
SpinPolicy SpinFor(size_t local_ranks, std::chrono::microseconds spin);

// Takes the links (links[rank] and links of absent peers null) and the abort state they share.
std::unique_ptr<Transport> NewLinkTransport(int rank, int size,
                                            std::vector<std::unique_ptr<PollableLink>> links,
                                            std::shared_ptr<AbortState> abort, SpinPolicy spin);

}  // namespace hvd::runtime::transport
