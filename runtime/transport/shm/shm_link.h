// ShmLink: the two channels between this rank and one peer on the same host (this rank's ring to
// the peer lives in this rank's segment; the peer's ring to us in the peer's segment). Private to
// transport/shm; the public entry point is shm::Connect in shm_transport.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/link_transport.h"
#include "transport/shm/segment.h"

namespace hvd::runtime::transport::shm {

// An eventfd owned once per rank and shared by all its links: peers write it to wake this rank.
struct Doorbell {
  explicit Doorbell(int fd) : fd(fd) {}
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;
  const int fd;
};

struct LinkEnds {
  std::shared_ptr<Segment> mine;    // holds our ring to the peer, channel `peer_index`
  std::shared_ptr<Segment> theirs;  // holds the peer's ring to us, channel `my_index`
  int my_index = -1;                // local indices (positions among the host's ranks)
  int peer_index = -1;
  std::shared_ptr<Doorbell> my_doorbell;
  int peer_doorbell = -1;  // owned: the peer's eventfd
  int liveness_fd = -1;    // owned: the connected setup socket
  int peer_pid = -1;       // the peer process (SO_PEERCRED of the setup socket); 0: another pid
                           // namespace; -1: unknown
};

class ShmLink final : public PollableLink {
 public:
  ShmLink(int peer, std::string description, LinkEnds ends, std::shared_ptr<AbortState> abort);
  ~ShmLink() override;

  int peer() const override { return peer_; }
  const std::string& description() const override { return description_; }
  Status TrySend(const void* data, size_t n, size_t* moved) override;
  Status TryRecv(void* data, size_t n, size_t* moved) override;
  size_t PeekRecv(size_t n, const void** data) override;
  void ConsumeRecv(size_t k) override;
  size_t PeekSend(size_t n, void** space) override;
  void CommitSend(size_t k) override;
  int peer_pid() const override { return ends_.peer_pid; }

  bool ReadyNow(bool send, bool recv) override;
  bool CanSpin() const override { return true; }
  void NoteCpu(int cpu) override;
  int PeerCpu() const override;
  size_t Arm(bool send, bool recv, std::vector<pollfd>* fds) override;
  void Disarm(bool send, bool recv, const pollfd* fds) override;
  void Shutdown() override;

 private:
  bool PeerGone() const;
  // Rings the peer's doorbell if it raised `flag` (it sleeps on us).
  void WakePeer(std::atomic<uint32_t>& flag);
  Status Failed() const;

  const int peer_;
  const std::string description_;
  const LinkEnds ends_;
  const std::shared_ptr<AbortState> abort_;
  Channel* const out_;  // our ring to the peer: we write tail, the peer writes head
  Channel* const in_;   // the peer's ring to us: the peer writes tail, we write head
  char* const out_ring_;
  char* const in_ring_;
  const uint64_t mask_;  // ring_bytes - 1

  // Only the thread driving the link touches these (one at a time, like the TCP link's fd).
  uint64_t tail_ = 0;              // out_->tail, which only we write
  uint64_t head_seen_ = 0;         // out_->head as last read
  uint64_t head_ = 0;              // in_->head, which only we write
  uint64_t tail_seen_ = 0;         // in_->tail as last read
  std::atomic<bool> gone_{false};  // the liveness fd reported the peer's end closed
};

}  // namespace hvd::runtime::transport::shm
