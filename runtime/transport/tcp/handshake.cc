#include "transport/tcp/handshake.h"

#include <cstddef>
#include <cstdint>

namespace hvd::runtime::transport::tcp {
namespace {

constexpr size_t kWireSize = 32;

void Put(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t Take(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// The fields TCP carries; the shared-memory ones stay 0 on both sides.
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

}  // namespace

Hello MakeHello(int rank, int size, const std::string& scope, int listen_port) {
  Hello h = transport::MakeHello(kTcpMagic, rank, size, scope);
  h.listen_port = static_cast<uint32_t>(listen_port);
  return h;
}

Status HandshakeAsConnector(int fd, const Hello& mine, int expected_rank, const std::string& what,
                            Deadline deadline, int cancel_fd) {
  uint8_t buf[kWireSize];
  Encode(mine, buf);
  HVD_RETURN_IF_ERROR(WriteFull(fd, buf, kWireSize, deadline, cancel_fd, what));
  HVD_RETURN_IF_ERROR(ReadFull(fd, buf, kWireSize, deadline, cancel_fd, what));
  return CheckReply(mine, Decode(buf), expected_rank, what);
}

Status HandshakeAsAcceptor(int fd, const Hello& mine, const std::function<bool(int)>& is_expected,
                           const std::string& what, Deadline deadline, int cancel_fd, Hello* peer) {
  uint8_t buf[kWireSize];
  HVD_RETURN_IF_ERROR(ReadFull(fd, buf, kWireSize, deadline, cancel_fd, what));
  *peer = Decode(buf);
  const Refusal r = CheckCaller(mine, *peer, is_expected);
  Hello reply = mine;
  reply.status = static_cast<uint32_t>(r);
  Encode(reply, buf);
  Status sent = WriteFull(fd, buf, kWireSize, deadline, cancel_fd, what);
  if (r != Refusal::kAccepted) return CallerRefused(r, mine, *peer, what);
  return sent;
}

}  // namespace hvd::runtime::transport::tcp
