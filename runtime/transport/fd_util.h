// Helpers shared by the transports' setup code (TCP and shared memory): deadline-bounded waits,
// full reads/writes on non-blocking stream sockets, the scope hash the handshakes compare. Every
// error names the syscall and errno ("recv from rank 2: Connection reset by peer (ECONNRESET)").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/errno_text.h"
#include "hvd/status.h"

namespace hvd::runtime::transport {

using Deadline = std::chrono::steady_clock::time_point;

// "Connection reset by peer (ECONNRESET)": every transport error names errno this way.
using base::ErrnoText;

// Blocks until `fd` reports any of `events` (or an error/hangup), `deadline` passes
// (DeadlineExceeded) or `cancel_fd` (>= 0) becomes readable (Cancelled).
Status WaitFd(int fd, short events, Deadline deadline, int cancel_fd);

// Writes / reads exactly n bytes on a non-blocking stream socket before `deadline`. `what` names
// the peer in errors. ReadFull reports EOF as Unavailable.
Status WriteFull(int fd, const void* data, size_t n, Deadline deadline, int cancel_fd,
                 const std::string& what);
Status ReadFull(int fd, void* data, size_t n, Deadline deadline, int cancel_fd,
                const std::string& what);

// FNV-1a of a communicator's scope: two ranks with different hashes are not in the same mesh.
uint64_t ScopeHash(const std::string& scope);

}  // namespace hvd::runtime::transport
