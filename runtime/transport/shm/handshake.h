// The one message each side of a shared-memory connection sends on the setup socket: who it is,
// for which communicator, and (as SCM_RIGHTS) its segment's memfd and its doorbell eventfd.
// SOCK_SEQPACKET keeps it one message, fds attached. The acceptor's reply carries a status; a
// refused caller gets the reason and no fds. The hello, the checks and the refusal codes are the
// core both transports share (transport/handshake.h); this is the shared-memory framing of it.
#pragma once

#include <cstddef>
#include <string>

#include "hvd/status.h"
#include "transport/fd_util.h"
#include "transport/handshake.h"

namespace hvd::runtime::transport::shm {

// This rank's hello.
Hello MakeHello(int rank, int size, const std::string& scope, int local_size, size_t ring_bytes);

// Sends `h` with the two fds (segment, doorbell; -1 for none) on the connected socket `fd`.
Status SendHello(int fd, const Hello& h, int segment_fd, int doorbell_fd, Deadline deadline,
                 const std::string& what);
// Receives a hello and its fds (-1 when absent). Unavailable on EOF, naming `what`.
Status RecvHello(int fd, Hello* h, int* segment_fd, int* doorbell_fd, Deadline deadline,
                 const std::string& what);

}  // namespace hvd::runtime::transport::shm
