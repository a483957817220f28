// ShmLink: see segment.h for the channel vocabulary.
//
// Memory order: the writer copies bytes into the ring, then stores tail with release; the reader
// loads tail with acquire before copying out, and stores head with release after. Sleeping uses
// the flag protocol of link_transport.h: the sleeper stores its waiting flag and issues a full
// fence before re-checking the index; the mover stores its index and issues a full fence before
// loading the flag. One of the two sees the other's store, so a wake-up is never lost.
#include "transport/shm/shm_link.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace hvd::runtime::transport::shm {
namespace {

// A large TrySend publishes its tail in pieces of this size, so the reader starts copying out
// (and reducing) while the writer is still copying in.
constexpr size_t kPublishBytes = 64 << 10;

void CopyIn(char* ring, uint64_t mask, uint64_t pos, const char* src, size_t n) {
  const size_t off = pos & mask;
  const size_t first = std::min(n, static_cast<size_t>(mask + 1 - off));
  std::memcpy(ring + off, src, first);
  if (first < n) std::memcpy(ring, src + first, n - first);
}

void CopyOut(const char* ring, uint64_t mask, uint64_t pos, char* dst, size_t n) {
  const size_t off = pos & mask;
  const size_t first = std::min(n, static_cast<size_t>(mask + 1 - off));
  std::memcpy(dst, ring + off, first);
  if (first < n) std::memcpy(dst + first, ring, n - first);
}

}  // namespace

Doorbell::~Doorbell() {
  close(fd);
}

ShmLink::ShmLink(int peer, std::string description, LinkEnds ends,
                 std::shared_ptr<AbortState> abort)
    : peer_(peer),
      description_(std::move(description)),
      ends_(std::move(ends)),
      abort_(std::move(abort)),
      out_(ends_.mine->channel(ends_.peer_index)),
      in_(ends_.theirs->channel(ends_.my_index)),
      out_ring_(ends_.mine->ring(ends_.peer_index)),
      in_ring_(ends_.theirs->ring(ends_.my_index)),
      mask_(ends_.mine->ring_bytes() - 1) {}

ShmLink::~ShmLink() {
  close(ends_.peer_doorbell);
  close(ends_.liveness_fd);
}

bool ShmLink::PeerGone() const {
  return gone_.load(std::memory_order_relaxed) ||
         ends_.theirs->closed().load(std::memory_order_acquire) != 0;
}

Status ShmLink::Failed() const {
  // Our own abort closes the channels too: report the abort, which is the cause.
  if (abort_->aborted()) return abort_->status();
  return Unavailable(description_ +
                     " closed the connection (the peer process exited or shut its transport "
                     "down)");
}

void ShmLink::WakePeer(std::atomic<uint32_t>& flag) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (flag.load(std::memory_order_relaxed) != 0 && flag.exchange(0) != 0) {
    uint64_t one = 1;
    // EAGAIN (counter saturated) still leaves the doorbell readable; nothing else can fail here
    // short of a closed fd, and then the peer is gone and its liveness fd says so.
    (void)!write(ends_.peer_doorbell, &one, sizeof(one));
  }
}

Status ShmLink::TrySend(const void* data, size_t n, size_t* moved) {
  *moved = 0;
  if (abort_->aborted()) return abort_->status();
  if (PeerGone()) return Failed();
  if (n == 0) return Status::OK();
  const uint64_t capacity = mask_ + 1;
  if (capacity - (tail_ - head_seen_) < n) head_seen_ = out_->head.load(std::memory_order_acquire);
  const size_t m = std::min<uint64_t>(n, capacity - (tail_ - head_seen_));
  if (m == 0) return Status::OK();
  const char* src = static_cast<const char*>(data);
  for (size_t done = 0; done < m;) {
    const size_t piece = std::min(kPublishBytes, m - done);
    CopyIn(out_ring_, mask_, tail_, src + done, piece);
    tail_ += piece;
    done += piece;
    out_->tail.store(tail_, std::memory_order_release);
  }
  *moved = m;
  WakePeer(out_->reader_waiting);
  return Status::OK();
}

Status ShmLink::TryRecv(void* data, size_t n, size_t* moved) {
  *moved = 0;
  if (abort_->aborted()) return abort_->status();
  if (n == 0) return Status::OK();
  if (tail_seen_ - head_ < n) tail_seen_ = in_->tail.load(std::memory_order_acquire);
  const size_t m = std::min<uint64_t>(n, tail_seen_ - head_);
  if (m == 0) return PeerGone() ? Failed() : Status::OK();
  CopyOut(in_ring_, mask_, head_, static_cast<char*>(data), m);
  head_ += m;
  in_->head.store(head_, std::memory_order_release);
  *moved = m;
  WakePeer(in_->writer_waiting);
  return Status::OK();
}

size_t ShmLink::PeekRecv(size_t n, const void** data) {
  if (n == 0 || abort_->aborted()) return 0;
  if (tail_seen_ - head_ < n) tail_seen_ = in_->tail.load(std::memory_order_acquire);
  const size_t off = head_ & mask_;
  const size_t m = std::min<uint64_t>({n, tail_seen_ - head_, mask_ + 1 - off});
  *data = in_ring_ + off;
  return m;
}

void ShmLink::ConsumeRecv(size_t k) {
  if (k == 0) return;
  head_ += k;
  in_->head.store(head_, std::memory_order_release);
  WakePeer(in_->writer_waiting);
}

size_t ShmLink::PeekSend(size_t n, void** space) {
  if (n == 0 || abort_->aborted() || PeerGone()) return 0;
  const uint64_t capacity = mask_ + 1;
  if (capacity - (tail_ - head_seen_) < n) head_seen_ = out_->head.load(std::memory_order_acquire);
  const size_t off = tail_ & mask_;
  const size_t m = std::min<uint64_t>({n, capacity - (tail_ - head_seen_), capacity - off});
  *space = out_ring_ + off;
  return m;
}

void ShmLink::CommitSend(size_t k) {
  if (k == 0) return;
  tail_ += k;
  out_->tail.store(tail_, std::memory_order_release);
  WakePeer(out_->reader_waiting);
}

bool ShmLink::ReadyNow(bool send, bool recv) {
  if (recv && in_->tail.load(std::memory_order_acquire) != head_) return true;
  if (send && tail_ - out_->head.load(std::memory_order_acquire) <= mask_) return true;
  return (send || recv) && PeerGone();
}

void ShmLink::NoteCpu(int cpu) {
  // Every link of this rank shares its segment: store only a change, so that the line stays
  // shared in the peers' caches while this rank stays where it is.
  std::atomic<int32_t>& mine = ends_.mine->cpu();
  if (mine.load(std::memory_order_relaxed) != cpu) mine.store(cpu, std::memory_order_relaxed);
}

int ShmLink::PeerCpu() const {
  return ends_.theirs->cpu().load(std::memory_order_relaxed);
}

size_t ShmLink::Arm(bool send, bool recv, std::vector<pollfd>* fds) {
  if (!send && !recv) return 0;
  if (recv) in_->reader_waiting.store(1, std::memory_order_relaxed);
  if (send) out_->writer_waiting.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  fds->push_back({ends_.my_doorbell->fd, POLLIN, 0});
  // No data ever flows on the setup socket after the handshake: any event is its end closing.
  fds->push_back({ends_.liveness_fd, POLLIN | POLLRDHUP, 0});
  return 2;
}

void ShmLink::Disarm(bool send, bool recv, const pollfd* fds) {
  if (!send && !recv) return;
  if (recv) in_->reader_waiting.store(0, std::memory_order_relaxed);
  if (send) out_->writer_waiting.store(0, std::memory_order_relaxed);
  if (fds[0].revents & POLLIN) {
    uint64_t count;
    (void)!read(ends_.my_doorbell->fd, &count, sizeof(count));  // EAGAIN: another link drained it
  }
  if (fds[1].revents != 0) gone_.store(true, std::memory_order_relaxed);
}

void ShmLink::Shutdown() {
  ends_.mine->closed().store(1, std::memory_order_release);
  shutdown(ends_.liveness_fd, SHUT_RDWR);
}

}  // namespace hvd::runtime::transport::shm
