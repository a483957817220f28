#include "agent/stdin_session.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace hvd::agent {

Status ReadTokenLine(int fd, std::chrono::milliseconds timeout, std::string* token) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string line;
  // One byte at a time: what follows the line is not ours to consume.
  while (line.size() < 4096) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    pollfd p{fd, POLLIN, 0};
    const int n = left > 0 ? poll(&p, 1, static_cast<int>(left)) : 0;
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      return DeadlineExceeded("--token-file -: no token line on stdin within " +
                              std::to_string(timeout.count() / 1000) + " s");
    }
    char c;
    const ssize_t r = n < 0 ? -1 : read(fd, &c, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Unavailable(std::string("--token-file -: read stdin: ") + strerror(errno));
    if (r == 0 || c == '\n') break;
    line += c;
  }
  const auto first = line.find_first_not_of(" \t\r");
  const auto last = line.find_last_not_of(" \t\r");
  if (first == std::string::npos) {
    return InvalidArgument(
        "--token-file -: stdin held no token; send the cluster token as the "
        "first line");
  }
  *token = line.substr(first, last - first + 1);
  return Status::OK();
}

void SigtermOnEof(int fd) {
  std::thread([fd] {
    char buf[256];
    while (true) {
      const ssize_t r = read(fd, buf, sizeof buf);
      if (r > 0 || (r < 0 && errno == EINTR)) continue;  // input is ignored; only its end counts
      kill(getpid(), SIGTERM);
      return;
    }
  }).detach();
}

}  // namespace hvd::agent
