// A minimal HTTP/1.0 GET for tests that read the launcher's REST answers (the body ends with the
// connection). Every call is bounded: 5 s per send and per receive.
#pragma once

#include <string>

namespace hvd::testing {

struct HttpAnswer {
  int status = 0;
  std::string body;
  std::string error;  // non-empty: no answer
};

// A TCP socket connected to 127.0.0.1:port with 3 s send and receive timeouts; -1 (errno set)
// when the connection fails.
int ConnectLoopback(int port);

// GET http://ip:port/path over `fd`, a fresh TCP socket (for one made inside a network namespace),
// or a new one when fd is -1. Closes the socket. A non-empty `token` goes as
// "Authorization: Bearer <token>", which the launcher's /v1/* needs.
HttpAnswer HttpGet(int fd, const std::string& ip, int port, const std::string& path,
                   const std::string& token = "");

}  // namespace hvd::testing
