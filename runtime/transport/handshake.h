// The handshake core both transports share: the hello each side of a new connection sends, the
// refusal codes an acceptor answers with, the checks that decide them and the texts that explain
// them. Only the framing differs: TCP encodes a 32-byte message (tcp/handshake.cc), shared memory
// sends the struct with its fds attached on a SOCK_SEQPACKET socket (shm/handshake.cc).
//
// Both ends of a connection are always the same build, so a code and a layout mean the same on
// both sides; one enum keeps the two transports from drifting apart.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "hvd/status.h"

namespace hvd::runtime::transport {

// Which transport's handshake a hello opens ("HVDT" / "HVDS" read as little-endian bytes): a TCP
// hello on a shared-memory socket, or anything else, is refused as kBadMagic.
inline constexpr uint32_t kTcpMagic = 0x54445648;
inline constexpr uint32_t kShmMagic = 0x53445648;
// Protocol versions, per transport: shared memory's hello grew to this struct's 48 bytes (from 40)
// with the shared core (2), then its segment header gained the owner's CPU (3: an older peer's
// zeroed field would read as "on CPU 0"); TCP's 32 bytes on the wire did not change.
inline constexpr uint32_t kTcpHelloVersion = 1;
inline constexpr uint32_t kShmHelloVersion = 3;

// Why an acceptor refused a caller, sent back in its reply's `status` (0: accepted).
enum class Refusal : uint32_t {
  kAccepted = 0,
  kBadMagic = 1,        // not an hvd hello of this transport
  kBadVersion = 2,      // another protocol version
  kSizeMismatch = 3,    // another communicator size
  kScopeMismatch = 4,   // another scope: a stale or other job
  kUnexpectedRank = 5,  // out of range, not a higher rank, or connected already
  kRingMismatch = 6,    // shared memory: another ring size (HVD_SHM_RING_BYTES)
  kLocalMismatch = 7,   // shared memory: another count of ranks on this host
};

// What a hello carries. A transport's own fields stay 0 in the other one, on both sides, so they
// always agree there. No padding: shared memory sends the struct as raw bytes.
struct Hello {
  uint32_t magic = 0;        // kTcpMagic or kShmMagic
  uint32_t version = 0;      // kTcpHelloVersion or kShmHelloVersion
  int32_t rank = -1;         // the sender's rank in the communicator
  int32_t size = 0;          // the communicator's size
  uint64_t scope_hash = 0;   // ScopeHash(scope): two ranks with different hashes never connect
  uint64_t ring_bytes = 0;   // shared memory: the bytes of each ring
  int32_t local_size = 0;    // shared memory: the ranks on this host
  uint32_t listen_port = 0;  // TCP: the port the sender accepts on
  uint32_t status = 0;       // in a reply: a Refusal code, 0 when accepted
  uint32_t reserved = 0;
};
static_assert(sizeof(Hello) == 48, "Hello has padding or a changed layout");

// A hello of transport `magic` for `rank` of `size` in `scope`; the caller sets its own fields.
Hello MakeHello(uint32_t magic, int rank, int size, const std::string& scope);

// "tcp", "shm", or the magic in hex for anything else.
std::string ProtocolName(uint32_t magic);

// Why `theirs` does not belong to the communicator of `mine`: magic, version, size, scope, ring
// size or local size differ, checked in that order. kAccepted when it does belong.
Refusal CheckHello(const Hello& mine, const Hello& theirs);

// Why `theirs` was refused for `r`, in this rank's words, with both sides' values.
std::string RefusalReason(Refusal r, const Hello& mine, const Hello& theirs);

// Acceptor side: CheckHello, then `is_expected(caller.rank)` (asked only when the rest agrees).
Refusal CheckCaller(const Hello& mine, const Hello& caller,
                    const std::function<bool(int)>& is_expected);
// The acceptor's error for a caller refused for `r`: FailedPrecondition "refused <tcp|shm>
// connection from <what>: <reason>", `what` naming the caller (its address, its pid).
Status CallerRefused(Refusal r, const Hello& mine, const Hello& caller, const std::string& what);

// Connector side: checks the acceptor's reply is of the same communicator, accepted this rank,
// and comes from `expected_rank`. FailedPrecondition "<tcp|shm> handshake with <what>: <why>"
// otherwise, `what` naming the peer ("rank 0 (127.0.0.1:4711)").
Status CheckReply(const Hello& mine, const Hello& reply, int expected_rank,
                  const std::string& what);

}  // namespace hvd::runtime::transport
