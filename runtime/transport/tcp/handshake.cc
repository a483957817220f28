#include "transport/tcp/handshake.h"

#include <cstdio>

namespace hvd::runtime::transport::tcp {
namespace {

constexpr uint32_t kMagic = 0x54445648;  // "HVDT" read as little-endian bytes
constexpr uint32_t kVersion = 1;
constexpr size_t kWireSize = 32;

enum Refusal : uint32_t {
  kAccepted = 0,
  kBadMagic = 1,
  kBadVersion = 2,
  kSizeMismatch = 3,
  kScopeMismatch = 4,
  kUnexpectedRank = 5,
};

void Put(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t Take(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

void Encode(const Hello& h, uint8_t* p) {
  Put(p, h.magic, 4);
  Put(p + 4, h.version, 4);
  Put(p + 8, static_cast<uint32_t>(h.rank), 4);
  Put(p + 12, static_cast<uint32_t>(h.size), 4);
  Put(p + 16, h.scope_hash, 8);
  Put(p + 24, h.listen_port, 4);
  Put(p + 28, h.status, 4);
}

Hello Decode(const uint8_t* p) {
  Hello h;
  h.magic = static_cast<uint32_t>(Take(p, 4));
  h.version = static_cast<uint32_t>(Take(p + 4, 4));
  h.rank = static_cast<int32_t>(Take(p + 8, 4));
  h.size = static_cast<int32_t>(Take(p + 12, 4));
  h.scope_hash = Take(p + 16, 8);
  h.listen_port = static_cast<uint32_t>(Take(p + 24, 4));
  h.status = static_cast<uint32_t>(Take(p + 28, 4));
  return h;
}

std::string Hex(uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Why `theirs` does not belong to the communicator described by `mine` (kAccepted when it does).
Refusal Check(const Hello& mine, const Hello& theirs) {
  if (theirs.magic != kMagic) return kBadMagic;
  if (theirs.version != kVersion) return kBadVersion;
  if (theirs.size != mine.size) return kSizeMismatch;
  if (theirs.scope_hash != mine.scope_hash) return kScopeMismatch;
  return kAccepted;
}

// Why `theirs` (the peer's hello) was refused, in this rank's words.
std::string Explain(Refusal r, const Hello& mine, const Hello& theirs) {
  switch (r) {
    case kAccepted:
      return "accepted";
    case kBadMagic:
      return "the peer did not send an hvd tcp handshake (magic " + Hex(theirs.magic) + ")";
    case kBadVersion:
      return "the peer speaks protocol version " + std::to_string(theirs.version) +
             ", this rank speaks " + std::to_string(mine.version);
    case kSizeMismatch:
      return "the peer has communicator size " + std::to_string(theirs.size) +
             ", this rank has size " + std::to_string(mine.size);
    case kScopeMismatch:
      return "the peer has a different scope (hash " + Hex(theirs.scope_hash) + ", this rank " +
             Hex(mine.scope_hash) + "): a stale or different job using the same store or port?";
    case kUnexpectedRank:
      return "rank " + std::to_string(theirs.rank) + " is not expected to connect to rank " +
             std::to_string(mine.rank) + " (out of range, not higher, or already connected)";
  }
  return "unknown refusal code " + std::to_string(static_cast<uint32_t>(r));
}

}  // namespace

Hello MakeHello(int rank, int size, const std::string& scope, int listen_port) {
  Hello h;
  h.magic = kMagic;
  h.version = kVersion;
  h.rank = rank;
  h.size = size;
  h.scope_hash = ScopeHash(scope);
  h.listen_port = static_cast<uint32_t>(listen_port);
  return h;
}

Status HandshakeAsConnector(int fd, const Hello& mine, int expected_rank, const std::string& what,
                            Deadline deadline, int cancel_fd) {
  uint8_t buf[kWireSize];
  Encode(mine, buf);
  HVD_RETURN_IF_ERROR(WriteFull(fd, buf, kWireSize, deadline, cancel_fd, what));
  HVD_RETURN_IF_ERROR(ReadFull(fd, buf, kWireSize, deadline, cancel_fd, what));
  Hello theirs = Decode(buf);
  std::string prefix = "handshake with " + what + ": ";
  Refusal r = Check(mine, theirs);
  if (r != kAccepted) return FailedPrecondition(prefix + Explain(r, mine, theirs));
  if (theirs.status != kAccepted) {
    std::string why = theirs.status == kUnexpectedRank
                          ? "it does not expect rank " + std::to_string(mine.rank) +
                                " (already connected, or two processes claim that rank)"
                          : Explain(static_cast<Refusal>(theirs.status), mine, theirs);
    return FailedPrecondition(prefix + "refused: " + why);
  }
  if (theirs.rank != expected_rank) {
    return FailedPrecondition(prefix + "the address published for rank " +
                              std::to_string(expected_rank) + " answered as rank " +
                              std::to_string(theirs.rank) + " (stale address in the store?)");
  }
  return Status::OK();
}

Status HandshakeAsAcceptor(int fd, const Hello& mine, const std::function<bool(int)>& is_expected,
                           const std::string& what, Deadline deadline, int cancel_fd, Hello* peer) {
  uint8_t buf[kWireSize];
  HVD_RETURN_IF_ERROR(ReadFull(fd, buf, kWireSize, deadline, cancel_fd, what));
  *peer = Decode(buf);
  Refusal r = Check(mine, *peer);
  if (r == kAccepted && !is_expected(peer->rank)) r = kUnexpectedRank;
  Hello reply = mine;
  reply.status = r;
  Encode(reply, buf);
  Status sent = WriteFull(fd, buf, kWireSize, deadline, cancel_fd, what);
  if (r != kAccepted) {
    return FailedPrecondition("refused connection from " + what + ": " + Explain(r, mine, *peer));
  }
  return sent;
}

}  // namespace hvd::runtime::transport::tcp
