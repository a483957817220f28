#include "launcherd/http_gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/logging.h"
#include "base/thread_annotations.h"
#include "control/log_escape.h"

namespace hvd::launcherd {
namespace {

using Clock = std::chrono::steady_clock;

// "ip:port" of the connection's peer, and the ip alone (the key refusals are rate limited by:
// a flood from one host uses many ports).
void PeerOf(int fd, std::string* peer, std::string* host) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  char ip[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0) {
    if (a.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
      inet_ntop(AF_INET, &v4->sin_addr, ip, sizeof ip);
      port = ntohs(v4->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
      inet_ntop(AF_INET6, &v6->sin6_addr, ip, sizeof ip);
      port = ntohs(v6->sin6_port);
    }
  }
  *host = ip;
  *peer = (a.ss_family == AF_INET6 ? "[" + *host + "]" : *host) + ":" + std::to_string(port);
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A complete head's verdict: served (body_bytes set), or refused with a status and why.
struct HeadVerdict {
  size_t head_bytes = 0;
  uint64_t body_bytes = 0;
  int status = 0;  // non-zero: refuse with this
  std::string why;
};

// `head` ends with its blank line. Only the framing is checked here (httplib parses the rest):
// the body must be announced by one Content-Length within the limit.
HeadVerdict CheckHead(std::string_view head, const HttpLimits& limits) {
  HeadVerdict v;
  v.head_bytes = head.size();
  bool have_length = false;
  size_t pos = head.find("\r\n") + 2;  // past the request line
  while (pos < head.size()) {
    const size_t eol = head.find("\r\n", pos);
    const std::string_view line = head.substr(pos, eol - pos);
    pos = eol + 2;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, colon), value = Trim(line.substr(colon + 1));
    if (EqualsIgnoreCase(name, "Transfer-Encoding")) {
      v.status = 411;
      v.why = "a request body must come with a Content-Length (at most " +
              std::to_string(limits.max_body_bytes) +
              " bytes), not Transfer-Encoding; the REST endpoint is read-only (GET)";
      return v;
    }
    if (!EqualsIgnoreCase(name, "Content-Length")) continue;
    uint64_t n = 0;
    bool digits = !value.empty() && value.size() <= 19;
    for (char c : value) {
      if (c < '0' || c > '9') digits = false;
      if (digits) n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    if (!digits || (have_length && n != v.body_bytes)) {
      v.status = 400;
      v.why = "malformed or repeated Content-Length";
      return v;
    }
    have_length = true;
    v.body_bytes = n;
  }
  if (v.body_bytes > limits.max_body_bytes) {
    v.status = 413;
    v.why = "a request body of " + std::to_string(v.body_bytes) + " bytes is over the limit of " +
            std::to_string(limits.max_body_bytes) + "; the REST endpoint is read-only (GET)";
  }
  return v;
}

const char* Reason(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Service Unavailable";
  }
}

// Answers and closes without blocking: the answer is small and the socket's send buffer empty.
// What the client already sent is drained first (bounded), so the close is not a reset that
// could destroy the answer before the client reads it.
void RefuseAndClose(int fd, int status, const std::string& why) {
  const std::string body = nlohmann::json{{"error", why}}.dump() + "\n";
  const std::string answer =
      "HTTP/1.1 " + std::to_string(status) + " " + Reason(status) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n" + body;
  (void)send(fd, answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  char sink[16384];
  for (int i = 0; i < 16 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
  }
  close(fd);
}

class HttpGateImpl final : public HttpGate {
 public:
  HttpGateImpl(const HttpLimits& limits, Serve serve)
      : limits_(limits), serve_(std::move(serve)), peek_(limits.max_head_bytes + 1) {}
  ~HttpGateImpl() override { Stop(); }

  Status Init() {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epoll_ < 0 || wake_ < 0) {
      return Internal(std::string("REST: cannot create the connection poller: ") +
                      std::strerror(errno));
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev);
    loop_ = std::thread([this] { Loop(); });
    for (int i = 0; i < std::max(1, limits_.workers); ++i) {
      workers_.emplace_back([this] { Work(); });
    }
    return Status::OK();
  }

  void Admit(int fd) override { Enqueue(fd, /*returning=*/false); }

  void Stop() override {
    {
      base::MutexLock lock(&mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    Wake();
    if (loop_.joinable()) loop_.join();
    work_cv_.NotifyAll();
    for (std::thread& t : workers_) t.join();
    // Nothing runs now: close what the loop and the workers left.
    for (const auto& [fd, c] : conns_) close(fd);
    conns_.clear();
    {
      // Uncontended (every thread is joined), but the analysis cannot know that.
      base::MutexLock lock(&mu_);
      for (const auto& [fd, returning] : pending_) close(fd);
      for (const GatedRequest& r : ready_) close(r.fd);
    }
    if (epoll_ >= 0) close(epoll_);
    if (wake_ >= 0) close(wake_);
  }

 private:
  struct Conn {
    std::string peer, host;
    Clock::time_point since;  // admitted, or back from a served request
    Clock::time_point first_byte = Clock::time_point::max();
  };

  void Wake() {
    uint64_t one = 1;
    (void)!write(wake_, &one, sizeof one);
  }

  void Enqueue(int fd, bool returning) {
    {
      base::MutexLock lock(&mu_);
      if (!stopped_) {
        pending_.emplace_back(fd, returning);
        fd = -1;
      }
    }
    if (fd >= 0) {
      close(fd);
    } else {
      Wake();
    }
  }

  void Loop() {
    epoll_event events[64];
    while (true) {
      const int n = epoll_wait(epoll_, events, 64, NextTimeoutMs());
      std::vector<std::pair<int, bool>> admitted;
      {
        base::MutexLock lock(&mu_);
        if (stopped_) return;
        admitted.swap(pending_);
      }
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == wake_) {
          uint64_t v;
          (void)!read(wake_, &v, sizeof v);
        } else if (conns_.count(fd)) {
          Examine(fd, (events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0);
        }
      }
      for (const auto& [fd, returning] : admitted) Register(fd, returning);
      Expire();
    }
  }

  void Register(int fd, bool returning) {
    Conn c;
    PeerOf(fd, &c.peer, &c.host);
    c.since = Clock::now();
    if (!returning && conns_.size() + busy_.load() >= limits_.max_connections && !Evict(c)) {
      refusals_.Warn(c.host, "REST: refused a connection from " + c.peer + ": " +
                                 std::to_string(limits_.max_connections) +
                                 " connections are being served (the cap)");
      return RefuseAndClose(fd, 503, "too many connections; try again");
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      close(fd);
      return;
    }
    conns_.emplace(fd, std::move(c));
    // Edge-triggered: what arrived before the registration (a pipelined request, a fast client)
    // raises no event, so look now.
    Examine(fd, false);
  }

  // At the cap: closes the waiting connection that has sent nothing for longest, else the one
  // slowest with its head. False when every connection is being served.
  bool Evict(const Conn& newcomer) {
    int victim = -1;
    std::pair<bool, Clock::time_point> best{true, Clock::time_point::max()};
    for (const auto& [fd, c] : conns_) {
      const bool sent = c.first_byte != Clock::time_point::max();
      const std::pair<bool, Clock::time_point> key{sent, sent ? c.first_byte : c.since};
      if (key < best) {
        best = key;
        victim = fd;
      }
    }
    if (victim < 0) return false;
    const Conn& c = conns_.at(victim);
    refusals_.Warn(c.host, "REST: " + std::to_string(limits_.max_connections) +
                               " connections open (the cap): closed one from " + c.peer +
                               " waiting for its request, to let in " + newcomer.peer);
    Drop(victim, 503, "too many connections; this one waited longest without a request");
    return true;
  }

  void Drop(int fd, int status, const std::string& why) {
    epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
    conns_.erase(fd);
    if (status == 0) {
      close(fd);
    } else {
      RefuseAndClose(fd, status, why);
    }
  }

  // Looks at what the connection has sent without taking it: a whole head goes to a worker.
  void Examine(int fd, bool hangup) {
    Conn& c = conns_.at(fd);
    const ssize_t n = recv(fd, peek_.data(), peek_.size(), MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return Drop(fd, 0, "");
    }
    if (n < 0) return;
    if (c.first_byte == Clock::time_point::max()) c.first_byte = Clock::now();
    const std::string_view seen(peek_.data(), static_cast<size_t>(n));
    const size_t end = seen.find("\r\n\r\n");
    if (end == std::string_view::npos) {
      if (seen.size() > limits_.max_head_bytes) {
        refusals_.Warn(c.host, "REST: refused a request from " + c.peer + ": its head is over " +
                                   std::to_string(limits_.max_head_bytes) + " bytes");
        return Drop(fd, 431,
                    "the request line and headers are over " +
                        std::to_string(limits_.max_head_bytes) + " bytes");
      }
      if (hangup) Drop(fd, 0, "");  // half a request and the peer is gone
      return;
    }
    HeadVerdict v = CheckHead(seen.substr(0, end + 4), limits_);
    if (v.status != 0) {
      refusals_.Warn(c.host, "REST: refused a request from " + c.peer + " (" +
                                 std::to_string(v.status) + "): " + v.why);
      return Drop(fd, v.status, v.why);
    }
    GatedRequest r{fd, c.peer, v.head_bytes, v.body_bytes};
    epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
    conns_.erase(fd);
    ++busy_;
    {
      base::MutexLock lock(&mu_);
      ready_.push_back(std::move(r));
    }
    work_cv_.NotifyOne();
  }

  Clock::time_point Deadline(const Conn& c) const {
    return c.first_byte == Clock::time_point::max() ? c.since + limits_.idle_timeout
                                                    : c.first_byte + limits_.head_timeout;
  }

  int NextTimeoutMs() const {
    auto next = Clock::now() + std::chrono::seconds(1);
    for (const auto& [fd, c] : conns_) next = std::min(next, Deadline(c));
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count() + 1;
    return static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
  }

  // Idle connections close quietly (keep-alive ends so); a head still incomplete is a refusal.
  void Expire() {
    const auto now = Clock::now();
    std::vector<int> late;
    for (const auto& [fd, c] : conns_) {
      if (now >= Deadline(c)) late.push_back(fd);
    }
    for (int fd : late) {
      const Conn& c = conns_.at(fd);
      if (c.first_byte == Clock::time_point::max()) {
        Drop(fd, 0, "");
        continue;
      }
      refusals_.Warn(c.host, "REST: closed a connection from " + c.peer +
                                 ": its request head was not complete " +
                                 std::to_string(limits_.head_timeout.count()) +
                                 " ms after its first byte");
      Drop(fd, 408, "the request head did not arrive in time");
    }
  }

  void Work() {
    while (true) {
      GatedRequest r;
      {
        base::MutexLock lock(&mu_);
        work_cv_.Wait(lock, [&]() HVD_REQUIRES(mu_) { return stopped_ || !ready_.empty(); });
        if (stopped_) return;
        r = std::move(ready_.front());
        ready_.pop_front();
      }
      bool keep = false;
      try {
        keep = serve_(r);
      } catch (const std::exception& e) {
        HVD_LOG(ERROR) << "REST: serving " << r.peer << ": " << e.what();
      }
      --busy_;
      if (keep) {
        Enqueue(r.fd, /*returning=*/true);
      } else {
        close(r.fd);
      }
    }
  }

  const HttpLimits limits_;
  const Serve serve_;
  int epoll_ = -1, wake_ = -1;
  std::thread loop_;
  std::vector<std::thread> workers_;
  // The loop thread's own: the connections waiting for a head, and the peek buffer.
  std::map<int, Conn> conns_;
  std::vector<char> peek_;
  std::atomic<size_t> busy_{0};  // connections a worker has
  control::RateLimitedLog refusals_;

  base::Mutex mu_;
  base::CondVar work_cv_;
  bool stopped_ HVD_GUARDED_BY(mu_) = false;
  std::vector<std::pair<int, bool>> pending_ HVD_GUARDED_BY(mu_);  // fd, back from a worker
  std::deque<GatedRequest> ready_ HVD_GUARDED_BY(mu_);
};

}  // namespace

Status HttpGate::Start(const HttpLimits& limits, Serve serve, std::unique_ptr<HttpGate>* out) {
  auto gate = std::make_unique<HttpGateImpl>(limits, std::move(serve));
  HVD_RETURN_IF_ERROR(gate->Init());
  *out = std::move(gate);
  return Status::OK();
}

}  // namespace hvd::launcherd
