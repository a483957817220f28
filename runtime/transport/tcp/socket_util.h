// Small POSIX socket helpers for the TCP transport: option setup, address parsing, and
// deadline-bounded waits and full reads/writes for the connection handshake. Every error names the
// syscall and errno ("connect 127.0.0.1:4711: Connection refused (ECONNREFUSED)").
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <string>

#include "hvd/status.h"

namespace hvd::runtime::transport::tcp {

using Deadline = std::chrono::steady_clock::time_point;

// "Connection reset by peer (ECONNRESET)".
std::string ErrnoText(int err);

// TCP_NODELAY, and SO_SNDBUF/SO_RCVBUF when buffer_bytes > 0.
Status SetStreamOptions(int fd, int buffer_bytes);

// Resolves an IPv4 address or host name (first A record) and port into *addr.
Status ResolveIPv4(const std::string& host, int port, sockaddr_in* addr);
// Splits "host:port" (the value ranks publish).
Status SplitHostPort(const std::string& hostport, std::string* host, int* port);
// "10.0.0.5" for the address in `addr`.
std::string IpText(const sockaddr_in& addr);

// Creates a non-blocking, close-on-exec listener bound to host:port (port 0: ephemeral) with
// SO_REUSEADDR; *bound_port receives the port actually bound.
Status Listen(const std::string& host, int port, int buffer_bytes, int backlog, int* fd,
              int* bound_port);

// Blocks until `fd` reports any of `events` (or an error/hangup), `deadline` passes
// (DeadlineExceeded) or `cancel_fd` (>= 0) becomes readable (Cancelled).
Status WaitFd(int fd, short events, Deadline deadline, int cancel_fd);

// One non-blocking connect attempt bounded by `deadline`; *fd receives a connected socket with
// the stream options applied. The caller retries on failure.
Status ConnectOnce(const sockaddr_in& addr, const std::string& what, int buffer_bytes,
                   Deadline deadline, int cancel_fd, int* fd);

// Writes / reads exactly n bytes on a non-blocking socket before `deadline`. `what` names the
// peer in errors. ReadFull reports EOF as Unavailable.
Status WriteFull(int fd, const void* data, size_t n, Deadline deadline, int cancel_fd,
                 const std::string& what);
Status ReadFull(int fd, void* data, size_t n, Deadline deadline, int cancel_fd,
                const std::string& what);

}  // namespace hvd::runtime::transport::tcp
