#include "transport/handshake.h"

#include "base/hex.h"
#include "transport/fd_util.h"

namespace hvd::runtime::transport {

Hello MakeHello(uint32_t magic, int rank, int size, const std::string& scope) {
  Hello h;
  h.magic = magic;
  h.version = magic == kShmMagic ? kShmHelloVersion : kTcpHelloVersion;
  h.rank = rank;
  h.size = size;
  h.scope_hash = ScopeHash(scope);
  return h;
}

std::string ProtocolName(uint32_t magic) {
  if (magic == kTcpMagic) return "tcp";
  if (magic == kShmMagic) return "shm";
  return "0x" + base::Hex(magic);
}

Refusal CheckHello(const Hello& mine, const Hello& theirs) {
  if (theirs.magic != mine.magic) return Refusal::kBadMagic;
  if (theirs.version != mine.version) return Refusal::kBadVersion;
  if (theirs.size != mine.size) return Refusal::kSizeMismatch;
  if (theirs.scope_hash != mine.scope_hash) return Refusal::kScopeMismatch;
  if (theirs.ring_bytes != mine.ring_bytes) return Refusal::kRingMismatch;
  if (theirs.local_size != mine.local_size) return Refusal::kLocalMismatch;
  return Refusal::kAccepted;
}

std::string RefusalReason(Refusal r, const Hello& mine, const Hello& theirs) {
  switch (r) {
    case Refusal::kAccepted:
      return "accepted";
    case Refusal::kBadMagic:
      return "the peer did not send an hvd " + ProtocolName(mine.magic) + " handshake (magic 0x" +
             base::Hex(theirs.magic) + ")";
    case Refusal::kBadVersion:
      return "the peer speaks protocol version " + std::to_string(theirs.version) +
             ", this rank speaks " + std::to_string(mine.version);
    case Refusal::kSizeMismatch:
      return "the peer has communicator size " + std::to_string(theirs.size) +
             ", this rank has size " + std::to_string(mine.size);
    case Refusal::kScopeMismatch:
      return "the peer has a different scope (hash 0x" + base::Hex(theirs.scope_hash) +
             ", this rank 0x" + base::Hex(mine.scope_hash) +
             "): a stale or different job using the same store or address?";
    case Refusal::kUnexpectedRank:
      return "rank " + std::to_string(theirs.rank) + " is not expected to connect to rank " +
             std::to_string(mine.rank) + " (out of range, not higher, or already connected)";
    case Refusal::kRingMismatch:
      return "the peer's rings have " + std::to_string(theirs.ring_bytes) + " bytes, this rank's " +
             std::to_string(mine.ring_bytes) + " (HVD_SHM_RING_BYTES differs)";
    case Refusal::kLocalMismatch:
      return "the peer counts " + std::to_string(theirs.local_size) +
             " ranks on this host, this rank " + std::to_string(mine.local_size) +
             " (HVD_HOSTNAME differs?)";
  }
  return "unknown refusal code " + std::to_string(static_cast<uint32_t>(r));
}

Refusal CheckCaller(const Hello& mine, const Hello& caller,
                    const std::function<bool(int)>& is_expected) {
  const Refusal r = CheckHello(mine, caller);
  if (r == Refusal::kAccepted && !is_expected(caller.rank)) return Refusal::kUnexpectedRank;
  return r;
}

Status CallerRefused(Refusal r, const Hello& mine, const Hello& caller, const std::string& what) {
  return FailedPrecondition("refused " + ProtocolName(mine.magic) + " connection from " + what +
                            ": " + RefusalReason(r, mine, caller));
}

Status CheckReply(const Hello& mine, const Hello& reply, int expected_rank,
                  const std::string& what) {
  const std::string prefix = ProtocolName(mine.magic) + " handshake with " + what + ": ";
  const Refusal r = CheckHello(mine, reply);
  if (r != Refusal::kAccepted) return FailedPrecondition(prefix + RefusalReason(r, mine, reply));
  // The reply's values agree with ours by now, so of the refusals only "unexpected rank" can be
  // about this side; it is told from here. The others (symmetric checks the acceptor made just as
  // this side did) are explained with both sides' values all the same.
  const auto status = static_cast<Refusal>(reply.status);
  if (status == Refusal::kUnexpectedRank) {
    return FailedPrecondition(prefix + "refused: it does not expect rank " +
                              std::to_string(mine.rank) +
                              " (already connected, or two processes claim that rank)");
  }
  if (status != Refusal::kAccepted) {
    return FailedPrecondition(prefix + "refused: " + RefusalReason(status, mine, reply));
  }
  if (reply.rank != expected_rank) {
    return FailedPrecondition(prefix + "the address published for rank " +
                              std::to_string(expected_rank) + " answered as rank " +
                              std::to_string(reply.rank) + " (stale address in the store?)");
  }
  return Status::OK();
}

}  // namespace hvd::runtime::transport
