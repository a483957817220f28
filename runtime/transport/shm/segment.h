// A rank's shared-memory segment: one memfd per rank, mapped by every rank of the same host.
// Private to transport/shm.
//
// Vocabulary:
//   owner     - the rank that created the segment; it is the only writer of its rings' data.
//   channel k - the byte stream from the owner to local rank k: a control block plus a ring of
//               ring_bytes (a power of two). The owner advances `tail` after writing, rank k
//               advances `head` after reading; both count bytes since the start, so
//               tail - head is what is in flight and the ring position is the count mod ring_bytes.
//   waiting   - a flag the sleeping side raises before it sleeps (writer: no space; reader: no
//               data); the other side, after moving its index, rings the sleeper's doorbell
//               (an eventfd) only when the flag is up.
//   cpu       - the CPU the owner was on when it last started or ended a wait (sched_getcpu),
//               -1 before its first: a peer that finds the rank it waits for on its own CPU
//               yields at once instead of pausing, as that rank cannot run until it does
//               (transport/link_transport.h, "spin").
//   closed    - raised by the owner when its transport aborts or closes; a reader treats a closed,
//               drained channel like a socket at EOF.
// A memfd has no name in any filesystem: it disappears when the last process holding it exits, so
// a crashed job leaves nothing behind. The name given to memfd_create only shows in /proc.
//
// Layout: [Header | Channel x local_size | padding to a page | ring x local_size]. The channel to
// the owner itself is never used.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "hvd/status.h"

namespace hvd::runtime::transport::shm {

struct alignas(64) Channel {
  // Written by the owner (the writer).
  std::atomic<uint64_t> tail{0};
  std::atomic<uint32_t> writer_waiting{0};
  char pad0[64 - 12];
  // Written by local rank k (the reader).
  std::atomic<uint64_t> head{0};
  std::atomic<uint32_t> reader_waiting{0};
  char pad1[64 - 12];
};
static_assert(sizeof(Channel) == 128, "one cache line per side");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be address-free");

class Segment {
 public:
  // Creates the owner's segment: memfd_create(name), ftruncate, mmap.
  static Status Create(const std::string& name, int owner, int local_size, size_t ring_bytes,
                       std::unique_ptr<Segment>* out);
  // Maps a peer's segment from `fd` (taking ownership of it) and checks that its header says
  // what the handshake said (owner, local size, ring size).
  static Status Map(int fd, const std::string& name, int owner, int local_size, size_t ring_bytes,
                    std::unique_ptr<Segment>* out);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  int fd() const { return fd_; }
  const std::string& name() const { return name_; }
  size_t ring_bytes() const { return ring_bytes_; }
  Channel* channel(int k) const;
  char* ring(int k) const;
  std::atomic<uint32_t>& closed() const;
  std::atomic<int32_t>& cpu() const;

 private:
  Segment(int fd, std::string name, void* base, size_t bytes, int local_size, size_t ring_bytes);

  const int fd_;
  const std::string name_;
  void* const base_;
  const size_t bytes_;
  const int local_size_;
  const size_t ring_bytes_;
};

}  // namespace hvd::runtime::transport::shm
