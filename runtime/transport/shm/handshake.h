// The one message each side of a shared-memory connection sends on the setup socket: who it is,
// for which communicator, and (as SCM_RIGHTS) its segment's memfd and its doorbell eventfd.
// SOCK_SEQPACKET keeps it one message, fds attached. The acceptor's reply carries a status; a
// refused caller gets the reason and no fds.
#pragma once

#include <cstdint>
#include <string>

#include "hvd/status.h"
#include "transport/fd_util.h"

namespace hvd::runtime::transport::shm {

enum Refusal : uint32_t {
  kAccepted = 0,
  kBadMagic = 1,
  kBadVersion = 2,
  kSizeMismatch = 3,
  kScopeMismatch = 4,
  kRingMismatch = 5,
  kLocalMismatch = 6,
  kUnexpectedRank = 7,
};

struct Hello {
  uint32_t magic = 0;
  uint32_t version = 0;
  int32_t rank = -1;
  int32_t size = 0;
  uint64_t scope_hash = 0;
  uint64_t ring_bytes = 0;
  int32_t local_size = 0;
  uint32_t status = kAccepted;  // in a reply: why not, when refused
};

// This rank's hello.
Hello MakeHello(int rank, int size, const std::string& scope, int local_size, size_t ring_bytes);

// Sends `h` with the two fds (segment, doorbell; -1 for none) on the connected socket `fd`.
Status SendHello(int fd, const Hello& h, int segment_fd, int doorbell_fd, Deadline deadline,
                 const std::string& what);
// Receives a hello and its fds (-1 when absent). Unavailable on EOF, naming `what`.
Status RecvHello(int fd, Hello* h, int* segment_fd, int* doorbell_fd, Deadline deadline,
                 const std::string& what);

// Why `theirs` does not belong with `mine` ("" when it does): magic, version, size, scope, ring
// size or local size differ. Sets *code to the refusal code to send back.
std::string Mismatch(const Hello& mine, const Hello& theirs, uint32_t* code);
// The text for a refusal code received in a reply.
std::string RefusalText(uint32_t code);

}  // namespace hvd::runtime::transport::shm
