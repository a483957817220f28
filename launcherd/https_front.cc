#include "launcherd/https_front.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <thread>

#include "control/log_escape.h"
#include "launcherd/listen_address.h"
#include "launcherd/tls_context.h"

namespace hvd::launcherd {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBufferBytes = 64 * 1024;  // per direction, per connection
constexpr int kTickMs = 200;                // how often timeouts are checked

struct Conn {
  int client = -1, backend = -1;
  SSL* ssl = nullptr;
  std::string peer;  // "ip:port", for logs
  bool handshaken = false, backend_connected = false, backend_eof = false, client_eof = false;
  std::string to_backend, to_client;  // plain bytes waiting for the other side
  Clock::time_point started, last_activity;
};

// "1.2.3.4:5" of a connected socket, for logs.
std::string PeerOf(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

class HttpsFrontImpl final : public HttpsFront {
 public:
  explicit HttpsFrontImpl(const HttpsFrontOptions& o) : options_(o) {}
  ~HttpsFrontImpl() override {
    Stop();
    if (ctx_ != nullptr) SSL_CTX_free(ctx_);
  }

  Status Init() {
    HVD_RETURN_IF_ERROR(NewServerTlsContext(options_.tls, "HTTPS", &ctx_));
    std::string host;
    int port = 0;
    HVD_RETURN_IF_ERROR_CTX(ParseListenAddress(options_.listen, &host, &port), "--http");
    if (IsWildcardHost(host)) host = "0.0.0.0";
    HVD_RETURN_IF_ERROR(ParseListenAddress(options_.backend, &backend_host_, &backend_port_));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
      return InvalidArgument("--http " + options_.listen +
                             ": HTTPS listens on an IPv4 address (e.g. 0.0.0.0:7080)");
    }
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int yes = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(listen_fd_, 1024) != 0) {
      return Unavailable("cannot listen for HTTPS on " + options_.listen + ": " +
                         std::strerror(errno) + "; pick another --http");
    }
    socklen_t len = sizeof addr;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    address_ = host + ":" + std::to_string(ntohs(addr.sin_port));
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &listen_fd_;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
    ev.data.ptr = &wake_fd_;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
    thread_ = std::thread([this] { Loop(); });
    return Status::OK();
  }

  std::string address() const override { return address_; }

  void Stop() override {
    if (stopping_.exchange(true)) return;
    if (wake_fd_ >= 0) {
      const uint64_t one = 1;
      (void)!write(wake_fd_, &one, sizeof one);
    }
    if (thread_.joinable()) thread_.join();
    for (Conn& c : conns_) Release(c);
    conns_.clear();
    for (int* fd : {&listen_fd_, &epoll_fd_, &wake_fd_}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
  }

 private:
  void Loop() {
    BlockSigpipeOnThisThread();  // TLS writes to a reset client (tls_context.h)
    epoll_event events[64];
    while (!stopping_.load()) {
      const int n = epoll_wait(epoll_fd_, events, 64, kTickMs);
      for (int i = 0; i < n; ++i) {
        void* p = events[i].data.ptr;
        if (p == &wake_fd_) return;
        if (p == &listen_fd_) {
          AcceptAll();
          continue;
        }
        auto* c = static_cast<Conn*>(p);
        if (c->client < 0) continue;  // closed earlier in this batch
        if (!Pump(*c)) Release(*c);
      }
      Sweep();
    }
  }

  void AcceptAll() {
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or an error of that one connection
      // Not Sweep() here: events of this epoll batch may still point at closed entries.
      const size_t live = static_cast<size_t>(
          std::count_if(conns_.begin(), conns_.end(), [](const Conn& c) { return c.client >= 0; }));
      if (live >= options_.max_connections) MakeRoom();
      conns_.emplace_back();
      Conn& c = conns_.back();
      c.client = fd;
      c.peer = PeerOf(fd);
      c.started = c.last_activity = Clock::now();
      c.ssl = SSL_new(ctx_);
      SSL_set_fd(c.ssl, fd);
      SSL_set_accept_state(c.ssl);
      c.backend = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      sockaddr_in b{};
      b.sin_family = AF_INET;
      b.sin_port = htons(static_cast<uint16_t>(backend_port_));
      inet_pton(AF_INET, backend_host_.c_str(), &b.sin_addr);
      if (connect(c.backend, reinterpret_cast<sockaddr*>(&b), sizeof b) != 0 &&
          errno != EINPROGRESS) {
        Release(c);
        continue;
      }
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      ev.data.ptr = &c;
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c.client, &ev);
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c.backend, &ev);
      if (!Pump(c)) Release(c);
    }
  }

  // At the cap: the oldest connection still in its handshake goes, else the longest idle one.
  void MakeRoom() {
    Conn* victim = nullptr;
    for (Conn& c : conns_) {
      if (c.client < 0) continue;
      if (victim == nullptr || (!c.handshaken && victim->handshaken) ||
          (c.handshaken == victim->handshaken && c.last_activity < victim->last_activity)) {
        victim = &c;
      }
    }
    if (victim != nullptr) {
      refusals_.Warn(control::PeerHost(victim->peer), "HTTPS: at the connection cap (" +
                                                          std::to_string(options_.max_connections) +
                                                          "); closed " + victim->peer);
      Release(*victim);
    }
  }

  // Moves whatever can move without blocking. False when the connection is over.
  bool Pump(Conn& c) {
    char buf[16384];
    bool progress = true;
    while (progress) {
      progress = false;
      if (!c.handshaken) {
        const int r = SSL_do_handshake(c.ssl);
        if (r != 1) {
          const int e = SSL_get_error(c.ssl, r);
          if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return true;
          std::string why = TakeOpenSslError();
          if (why.empty()) why = "the client closed the connection";
          refusals_.Warn(control::PeerHost(c.peer),
                         "HTTPS: handshake with " + c.peer + " failed: " + control::LogEscape(why));
          return false;
        }
        c.handshaken = true;
        progress = true;
      }
      if (!c.backend_connected) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c.backend, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) return false;
        sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        c.backend_connected = getpeername(c.backend, reinterpret_cast<sockaddr*>(&ss), &sl) == 0;
      }
      while (!c.client_eof && c.to_backend.size() < kBufferBytes) {
        const int room = static_cast<int>(std::min(sizeof buf, kBufferBytes - c.to_backend.size()));
        const int n = SSL_read(c.ssl, buf, room);
        if (n > 0) {
          c.to_backend.append(buf, static_cast<size_t>(n));
          progress = true;
          continue;
        }
        const int e = SSL_get_error(c.ssl, n);
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) c.client_eof = true;
        ERR_clear_error();
        break;
      }
      if (c.backend_connected && !c.to_backend.empty()) {
        const ssize_t n = send(c.backend, c.to_backend.data(), c.to_backend.size(), MSG_NOSIGNAL);
        if (n > 0) {
          c.to_backend.erase(0, static_cast<size_t>(n));
          progress = true;
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
          return false;
        }
      }
      while (c.backend_connected && !c.backend_eof && c.to_client.size() < kBufferBytes) {
        const ssize_t n =
            recv(c.backend, buf, std::min(sizeof buf, kBufferBytes - c.to_client.size()), 0);
        if (n > 0) {
          c.to_client.append(buf, static_cast<size_t>(n));
          progress = true;
          continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) c.backend_eof = true;
        break;
      }
      if (!c.to_client.empty()) {
        const int n = SSL_write(c.ssl, c.to_client.data(), static_cast<int>(c.to_client.size()));
        if (n > 0) {
          c.to_client.erase(0, static_cast<size_t>(n));
          progress = true;
        } else {
          const int e = SSL_get_error(c.ssl, n);
          ERR_clear_error();
          if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) return false;
        }
      }
      if (progress) c.last_activity = Clock::now();
    }
    // The REST server closed (after its answer) and the answer is out; or the client left.
    if (c.backend_eof && c.to_client.empty()) {
      SSL_shutdown(c.ssl);
      return false;
    }
    return !c.client_eof;
  }

  void Release(Conn& c) {
    if (c.ssl != nullptr) SSL_free(c.ssl);
    c.ssl = nullptr;
    for (int* fd : {&c.client, &c.backend}) {
      if (*fd >= 0) close(*fd);  // closing drops it from the epoll set
      *fd = -1;
    }
  }

  // Ends connections past their handshake or idle deadline and forgets closed ones.
  void Sweep() {
    const auto now = Clock::now();
    for (auto it = conns_.begin(); it != conns_.end();) {
      Conn& c = *it;
      if (c.client >= 0 && !c.handshaken && now - c.started > options_.handshake_timeout) {
        refusals_.Warn(control::PeerHost(c.peer),
                       "HTTPS: " + c.peer + " did not finish its handshake in " +
                           std::to_string(options_.handshake_timeout.count()) + " ms; closed");
        Release(c);
      } else if (c.client >= 0 && now - c.last_activity > options_.idle_timeout) {
        Release(c);
      }
      it = c.client < 0 ? conns_.erase(it) : std::next(it);
    }
  }

  const HttpsFrontOptions options_;
  SSL_CTX* ctx_ = nullptr;
  std::string address_, backend_host_;
  int backend_port_ = 0;
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1;
  std::list<Conn> conns_;  // the loop thread's; stable addresses for epoll's data.ptr
  control::RateLimitedLog refusals_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace

Status HttpsFront::Start(const HttpsFrontOptions& options, std::unique_ptr<HttpsFront>* out) {
  auto front = std::make_unique<HttpsFrontImpl>(options);
  HVD_RETURN_IF_ERROR(front->Init());
  *out = std::move(front);
  return Status::OK();
}

}  // namespace hvd::launcherd
