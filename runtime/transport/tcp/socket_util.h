// Small POSIX socket helpers for the TCP transport: option setup, listening and connecting
// (addresses are parsed and resolved by base/net.h; deadline-bounded waits and full reads/writes
// are in transport/fd_util.h). Every error names the syscall and errno ("connect 127.0.0.1:4711:
// Connection refused (ECONNREFUSED)").
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <string>

#include "hvd/status.h"
#include "transport/fd_util.h"

namespace hvd::runtime::transport::tcp {

// TCP_NODELAY, and SO_SNDBUF/SO_RCVBUF when buffer_bytes > 0.
Status SetStreamOptions(int fd, int buffer_bytes);

// "10.0.0.5" for the address in `addr`.
std::string IpText(const sockaddr_in& addr);

// Creates a non-blocking, close-on-exec listener bound to host:port (port 0: ephemeral) with
// SO_REUSEADDR; *bound_port receives the port actually bound.
Status Listen(const std::string& host, int port, int buffer_bytes, int backlog, int* fd,
              int* bound_port);

// One non-blocking connect attempt bounded by `deadline`; *fd receives a connected socket with
// the stream options applied. The caller retries on failure.
Status ConnectOnce(const sockaddr_in& addr, const std::string& what, int buffer_bytes,
                   Deadline deadline, int cancel_fd, int* fd);

}  // namespace hvd::runtime::transport::tcp
