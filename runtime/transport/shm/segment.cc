#include "transport/shm/segment.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport/fd_util.h"

namespace hvd::runtime::transport::shm {
namespace {

constexpr uint64_t kMagic = 0x314d485344564840ull;  // "@HVDSHM1"
constexpr size_t kPage = 4096;

struct alignas(64) Header {
  uint64_t magic;
  int32_t owner;
  int32_t local_size;
  uint64_t ring_bytes;
  std::atomic<uint32_t> closed;
  std::atomic<int32_t> cpu;  // see Segment::cpu(); -1 until the owner first waits
};

size_t ChannelsOffset() {
  return sizeof(Header);
}
size_t RingsOffset(int local_size) {
  const size_t end = ChannelsOffset() + sizeof(Channel) * static_cast<size_t>(local_size);
  return (end + kPage - 1) / kPage * kPage;
}
size_t TotalBytes(int local_size, size_t ring_bytes) {
  return RingsOffset(local_size) + ring_bytes * static_cast<size_t>(local_size);
}

// Maps `bytes` of `fd`; closes `fd` when it fails.
Status MapFd(int fd, const std::string& name, size_t bytes, void** base) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    Status s = Unavailable("mmap of shared-memory segment '" + name + "' (" +
                           std::to_string(bytes) + " bytes): " + ErrnoText(errno));
    close(fd);
    return s;
  }
  *base = p;
  return Status::OK();
}

}  // namespace

Segment::Segment(int fd, std::string name, void* base, size_t bytes, int local_size,
                 size_t ring_bytes)
    : fd_(fd),
      name_(std::move(name)),
      base_(base),
      bytes_(bytes),
      local_size_(local_size),
      ring_bytes_(ring_bytes) {}

Segment::~Segment() {
  munmap(base_, bytes_);
  if (fd_ >= 0) close(fd_);
}

Status Segment::Create(const std::string& name, int owner, int local_size, size_t ring_bytes,
                       std::unique_ptr<Segment>* out) {
  const size_t bytes = TotalBytes(local_size, ring_bytes);
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) {
    return Unavailable("memfd_create('" + name + "'): " + ErrnoText(errno));
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    Status s = Unavailable("ftruncate of shared-memory segment '" + name + "' to " +
                           std::to_string(bytes) + " bytes: " + ErrnoText(errno));
    close(fd);
    return s;
  }
  void* base = nullptr;
  HVD_RETURN_IF_ERROR(MapFd(fd, name, bytes, &base));
  // The file starts zeroed: every channel is empty with no one waiting. Only the header is set.
  new (base) Header{kMagic, owner, local_size, ring_bytes, {0}, {-1}};
  for (int k = 0; k < local_size; ++k) {
    new (static_cast<char*>(base) + ChannelsOffset() + sizeof(Channel) * k) Channel();
  }
  out->reset(new Segment(fd, name, base, bytes, local_size, ring_bytes));
  return Status::OK();
}

Status Segment::Map(int fd, const std::string& name, int owner, int local_size, size_t ring_bytes,
                    std::unique_ptr<Segment>* out) {
  const size_t bytes = TotalBytes(local_size, ring_bytes);
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    Status s = FailedPrecondition("shared-memory segment '" + name + "' has " +
                                  std::to_string(st.st_size) + " bytes, expected " +
                                  std::to_string(bytes));
    close(fd);
    return s;
  }
  void* base = nullptr;
  HVD_RETURN_IF_ERROR(MapFd(fd, name, bytes, &base));
  const Header* h = static_cast<const Header*>(base);
  if (h->magic != kMagic || h->owner != owner || h->local_size != local_size ||
      h->ring_bytes != ring_bytes) {
    munmap(base, bytes);
    close(fd);
    return FailedPrecondition("shared-memory segment '" + name +
                              "' does not match its handshake (owner " + std::to_string(h->owner) +
                              ", " + std::to_string(h->local_size) + " local ranks, ring " +
                              std::to_string(h->ring_bytes) + " bytes)");
  }
  // The mapping keeps the memory alive; the fd is not needed any more.
  close(fd);
  out->reset(new Segment(-1, name, base, bytes, local_size, ring_bytes));
  return Status::OK();
}

Channel* Segment::channel(int k) const {
  return reinterpret_cast<Channel*>(static_cast<char*>(base_) + ChannelsOffset() +
                                    sizeof(Channel) * static_cast<size_t>(k));
}

char* Segment::ring(int k) const {
  return static_cast<char*>(base_) + RingsOffset(local_size_) +
         ring_bytes_ * static_cast<size_t>(k);
}

std::atomic<uint32_t>& Segment::closed() const {
  return static_cast<Header*>(base_)->closed;
}

std::atomic<int32_t>& Segment::cpu() const {
  return static_cast<Header*>(base_)->cpu;
}

}  // namespace hvd::runtime::transport::shm
