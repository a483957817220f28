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

// GET http://ip:port/path over `fd`, a fresh TCP socket (for one made inside a network namespace),
// or a new one when fd is -1. Closes the socket.
HttpAnswer HttpGet(int fd, const std::string& ip, int port, const std::string& path);

}  // namespace hvd::testing
