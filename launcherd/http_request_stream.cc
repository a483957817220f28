#include "launcherd/http_request_stream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hvd::launcherd {
namespace {

void Address(int (*get)(int, sockaddr*, socklen_t*), int fd, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  char text[INET6_ADDRSTRLEN] = "";
  port = 0;
  if (get(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0) {
    if (a.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
      inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
      port = ntohs(v6->sin6_port);
    } else if (a.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
      inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
      port = ntohs(v4->sin_port);
    }
  }
  ip = text;
}

}  // namespace

bool RequestStream::is_readable() const {
  return pos_ < len_ || (left_ > 0 && Wait(POLLIN));
}

bool RequestStream::is_writable() const {
  return Wait(POLLOUT);
}

ssize_t RequestStream::read(char* ptr, size_t size) {
  if (pos_ == len_) {
    if (left_ == 0) return 0;  // the request's end
    pos_ = len_ = 0;
    while (true) {
      const ssize_t n = recv(fd_, buf_, std::min(sizeof buf_, left_), 0);
      if (n > 0) {
        len_ = static_cast<size_t>(n);
        left_ -= len_;
        break;
      }
      if (n == 0) return 0;
      if (errno == EINTR) continue;
      if ((errno == EAGAIN || errno == EWOULDBLOCK) && Wait(POLLIN)) continue;
      return -1;
    }
  }
  const size_t n = std::min(size, len_ - pos_);
  std::memcpy(ptr, buf_ + pos_, n);
  pos_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t RequestStream::write(const char* ptr, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = send(fd_, ptr + done, size - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && Wait(POLLOUT)) {
      continue;
    } else {
      return -1;
    }
  }
  return static_cast<ssize_t>(size);
}

void RequestStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  Address(getpeername, fd_, ip, port);
}

void RequestStream::get_local_ip_and_port(std::string& ip, int& port) const {
  Address(getsockname, fd_, ip, port);
}

bool RequestStream::Wait(short events) const {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline_ - std::chrono::steady_clock::now())
                        .count();
  if (left <= 0) return false;
  pollfd p{fd_, events, 0};
  return poll(&p, 1, static_cast<int>(left)) == 1 && (p.revents & (events | POLLHUP)) != 0;
}

}  // namespace hvd::launcherd
