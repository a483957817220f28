// The runtime's rendezvous endpoint: one epoll loop thread owns every connection (kv_connection.h).
// A WAIT is parked in the store (KvStore::WaitAsync) and its completion comes back through a
// mailbox and an eventfd, so a waiting rank costs a socket and a few hundred bytes, not a thread;
// its deadline, like every other, is an entry in the loop's timer set. A peer that disconnects is
// seen by the loop at once (EPOLLRDHUP), which ends its wait. Requests are served inline: they
// take the store's lock for a map operation (and the job manager's, through the store's observer).
//
// Before HELLO a connection may send one frame of kMaxHelloFrameBytes; nothing is allocated from a
// length header before it is checked against the limit of the connection's state and the bytes in
// flight for its job and for the server. Stop() ends the loop and closes every connection; the
// store stays usable (the launcher shuts it down itself).
#include "launcherd/kv_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "base/errno_text.h"
#include "base/mutex.h"
#include "base/net.h"
#include "launcherd/kv_server_impl.h"
#include "launcherd/tls_context.h"

namespace hvd::launcherd::kvserver {

using base::ErrnoText;

KvServerImpl::~KvServerImpl() {
  Stop();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (ssl_ctx_ != nullptr) SSL_CTX_free(ssl_ctx_);
}

Status KvServerImpl::Listen(const std::string& listen) {
  base::HostPortRules rules;
  rules.port_zero = true;
  base::HostPort hp;
  if (!base::ParseHostPort(listen, rules, &hp).ok()) {
    return InvalidArgument("rendezvous endpoint: listen address '" + listen +
                           "' is not HOST:PORT with a port in 0..65535 (0 picks a free one)");
  }
  sockaddr_in addr{};
  Status resolved = base::ResolveIPv4(hp.host, hp.port, &addr);
  if (!resolved.ok()) {
    return InvalidArgument("rendezvous endpoint: " + resolved.message());
  }

  if (options_.tls.enabled()) {
    HVD_RETURN_IF_ERROR(NewServerTlsContext(options_.tls, "rendezvous endpoint", &ssl_ctx_));
  }
  // Every connection is a descriptor: make room for the cap if the hard limit allows.
  rlimit nofile{};
  const rlim_t need = options_.max_connections + kMaxRefusing + 256;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < need) {
    nofile.rlim_cur = std::min(need, nofile.rlim_max);
    setrlimit(RLIMIT_NOFILE, &nofile);
    getrlimit(RLIMIT_NOFILE, &nofile);
    if (nofile.rlim_cur < need) {
      HVD_LOG(WARNING) << "rendezvous endpoint: the open-file limit (" << nofile.rlim_cur
                       << ") is below the " << options_.max_connections
                       << " connections it may serve; raise it (ulimit -n, LimitNOFILE=)";
    }
  }

  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  mailbox_->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (stop_fd_ < 0 || mailbox_->wake_fd < 0 || epoll_fd_ < 0) {
    return Internal("rendezvous endpoint: eventfd/epoll: " + ErrnoText(errno));
  }
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Internal("rendezvous endpoint: socket: " + ErrnoText(errno));
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Unavailable("rendezvous endpoint: bind " + listen + ": " + ErrnoText(errno) +
                       "; choose another address or port for it");
  }
  if (::listen(listen_fd_, SOMAXCONN) != 0) {
    return Unavailable("rendezvous endpoint: listen on " + listen + ": " + ErrnoText(errno));
  }
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  address_ = hp.host + ":" + std::to_string(ntohs(addr.sin_port));
  for (auto [fd, tag] : {std::pair{listen_fd_, kListenTag}, std::pair{stop_fd_, kStopTag},
                         std::pair{mailbox_->wake_fd, kWakeTag}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return Internal("rendezvous endpoint: epoll_ctl: " + ErrnoText(errno));
    }
  }
  loop_ = std::thread([this] { Loop(); });
  return Status::OK();
}

void KvServerImpl::Loop() {
  BlockSigpipeOnThisThread();  // TLS writes to a reset peer (tls_context.h)
  epoll_event events[256];
  bool listening = true;
  for (;;) {
    auto now = Clock::now();
    if (!listening && now >= listen_paused_until_) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kListenTag;
      epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
      listening = true;
    }
    Clock::time_point next = Clock::time_point::max();
    if (!timers_.empty()) next = timers_.begin()->first;
    if (!listening) next = std::min(next, listen_paused_until_);
    int timeout_ms = -1;
    if (next != Clock::time_point::max()) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          std::chrono::ceil<std::chrono::milliseconds>(next - now).count(), 0, 60000));
    }
    int n = epoll_wait(epoll_fd_, events, 256, timeout_ms);
    if (n < 0 && errno != EINTR) {
      HVD_LOG(ERROR) << "rendezvous endpoint " << address_ << ": epoll_wait: " << ErrnoText(errno)
                     << "; no longer serving";
      break;
    }
    bool stop = false;
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kStopTag) {
        stop = true;
      } else if (tag == kListenTag) {
        Accept();
        if (Clock::now() < listen_paused_until_ && listening) {
          epoll_event ev{};
          ev.data.u64 = kListenTag;
          epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
          listening = false;
        }
      } else if (tag == kWakeTag) {
        uint64_t count;
        (void)!read(mailbox_->wake_fd, &count, sizeof(count));
      } else if (auto it = conns_.find(tag); it != conns_.end()) {
        OnEvent(*it->second, events[i].events);
      }
    }
    if (stop) break;
    DeliverWaits();
    now = Clock::now();
    while (!timers_.empty() && timers_.begin()->first <= now) {
      const uint64_t id = timers_.begin()->second;
      timers_.erase(timers_.begin());
      auto it = conns_.find(id);
      if (it == conns_.end()) continue;
      it->second->timer_at = Clock::time_point::max();
      OnTimer(*it->second, now);
    }
    UpdateStats();
  }
  std::vector<uint64_t> ids;
  for (const auto& [id, c] : conns_) ids.push_back(id);
  for (uint64_t id : ids) Close(*conns_.at(id), nullptr);
  UpdateStats();
}

void KvServerImpl::Accept() {
  for (int i = 0; i < 64; ++i) {  // then let established connections have a turn
    sockaddr_in from{};
    socklen_t len = sizeof(from);
    int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The pending connection keeps the listener readable: pause it instead of spinning.
        log_refused_.Warn("rendezvous endpoint " + address_ + ": accept: " + ErrnoText(errno) +
                          "; raise the open-file limit (ulimit -n)");
        listen_paused_until_ = Clock::now() + kAcceptBackoff;
      }
      return;  // EAGAIN, or the caller gave up before we accepted
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &from.sin_addr, ip, sizeof(ip));
    Admit(fd, std::string(ip) + ":" + std::to_string(ntohs(from.sin_port)));
  }
}

void KvServerImpl::Admit(int fd, const std::string& peer) {
  const bool full = conns_.size() - refusing_ >= options_.max_connections;
  if (full && refusing_ >= kMaxRefusing) {
    close(fd);
    base::MutexLock lock(&stats_mu_);
    ++stats_.refused;
    return;
  }
  auto owned = std::make_unique<Conn>(next_id_++, fd, peer);
  Conn& c = *owned;
  if (ssl_ctx_ != nullptr) {
    c.ssl = SSL_new(ssl_ctx_);
    if (c.ssl == nullptr || SSL_set_fd(c.ssl, fd) != 1) {
      log_tls_.Warn("rendezvous endpoint " + address_ + ": no TLS session for " + peer + ": " +
                    TakeOpenSslError() + "; closed it");
      return;  // `owned` closes it
    }
    SSL_set_accept_state(c.ssl);
  } else {
    c.handshaken = true;
  }
  conns_.emplace(c.id, std::move(owned));
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = c.id;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  if (full) {
    c.refused = true;
    ++refusing_;
    {
      base::MutexLock lock(&stats_mu_);
      ++stats_.refused;
    }
    log_refused_.Warn("rendezvous endpoint " + address_ + ": refused a connection from " + peer +
                      ": " + std::to_string(options_.max_connections) +
                      " connections are open, the limit");
    Reply(c, kv::Op::kHello,
          Unavailable("rendezvous endpoint " + address_ + " has " +
                      std::to_string(options_.max_connections) +
                      " connections open, its limit; retry later or spread jobs over several "
                      "launchers"),
          /*then_close=*/true);
    return;
  }
  if (unauth_.size() >= options_.max_unauthenticated) {
    Conn& oldest = *conns_.at(unauth_.front());
    log_evicted_.Warn("rendezvous endpoint " + address_ + ": closed the connection from " +
                      oldest.peer + ", which had not authenticated, to admit " + peer + " (" +
                      std::to_string(options_.max_unauthenticated) +
                      " connections without HELLO are the limit)");
    {
      base::MutexLock lock(&stats_mu_);
      ++stats_.evicted;
    }
    Close(oldest, nullptr);
  }
  c.unauth_pos = unauth_.insert(unauth_.end(), c.id);
  c.in_unauth = true;
  SetDeadline(c, Clock::now() + options_.hello_timeout);
}

bool KvServerImpl::StepHandshake(Conn& c, uint32_t* events) {
  if (*events & EPOLLERR) {
    Close(c, "connection error");
    return false;
  }
  if (!c.tls_started) {
    // A rank that dials hvd:// (plain) sends a frame header where a ClientHello begins with a
    // handshake record (22): tell it, in its own protocol, instead of failing a handshake it
    // would retry until its timeout.
    unsigned char first = 0;
    const ssize_t r = recv(c.fd, &first, 1, MSG_PEEK);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    c.tls_started = true;
    if (r == 1 && first != 22) {
      SSL_free(c.ssl);
      c.ssl = nullptr;
      c.handshaken = true;
      log_tls_.Warn("rendezvous endpoint " + address_ + ": " + c.peer +
                    " spoke plain TCP to this TLS endpoint; told it to dial hvds://");
      {
        base::MutexLock lock(&stats_mu_);
        ++stats_.tls_failed;
      }
      Reply(c, kv::Op::kHello,
            FailedPrecondition("this launcher's rendezvous endpoint " + address_ +
                               " speaks TLS (the launcher has --tls-cert): ranks must dial "
                               "hvds://" +
                               address_ + " with HVD_RENDEZVOUS_CA set (hvd-agent sets both)"),
            /*then_close=*/true);
      return false;
    }
  }
  std::string error;
  switch (HandshakeStep(c, &error)) {
    case Handshake::kWantRead:
      Arm(c, false);  // a queued refusal waits for the handshake, not for room
      return false;
    case Handshake::kWantWrite:
      Arm(c, true);
      return false;
    case Handshake::kFailed:
      log_tls_.Warn("rendezvous endpoint " + address_ + ": TLS handshake with " + c.peer +
                    " failed: " + control::LogEscape(error) +
                    " (ranks dial hvds:// and check this launcher's certificate against "
                    "HVD_RENDEZVOUS_CA); closed it");
      {
        base::MutexLock lock(&stats_mu_);
        ++stats_.tls_failed;
      }
      Close(c, nullptr);
      return false;
    case Handshake::kDone:
      break;
  }
  const uint64_t id = c.id;
  if (!c.out.empty()) {
    Flush(c);  // a refusal queued at the connection cap
  } else {
    Arm(c, false);  // a step that wanted room may have left EPOLLOUT armed
  }
  if (!conns_.count(id)) return false;
  // Its first request may have come with the handshake's last bytes, already decrypted and
  // buffered inside OpenSSL where epoll cannot see them: read now.
  *events |= EPOLLIN;
  return true;
}

void KvServerImpl::OnEvent(Conn& c, uint32_t events) {
  const uint64_t id = c.id;  // `c` is gone once Flush or Close closed it
  if (!c.handshaken && !StepHandshake(c, &events)) return;
  if (c.state == ConnState::kClosing) {
    if ((events & EPOLLOUT) && !c.out.empty()) Flush(c);
    if (!conns_.count(id)) return;
    // Input is discarded unread, always (level-triggered epoll would report it again and again);
    // a peer that has left gets nothing more.
    if ((events & (EPOLLERR | EPOLLHUP)) || ((events & (EPOLLIN | EPOLLRDHUP)) && Drain(c))) {
      Close(c, nullptr);
    }
    return;
  }
  if (events & EPOLLERR) {
    Close(c, "connection error");
    return;
  }
  if ((events & EPOLLOUT) && !c.out.empty()) {
    Flush(c);
    if (!conns_.count(id)) return;
  }
  if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP))) return;
  if (c.state == ConnState::kWaiting || !c.out.empty()) {
    // A request is in flight: the client reads its answer before it sends again, so input now
    // is its departure (or a protocol violation, which ends it as well).
    const int r = PeekInFlight(c);
    if (r < 0) return;
    if (r > 0) {
      log_bad_.Warn("rendezvous endpoint " + address_ + ": " + c.peer +
                    " sent a request before its previous one was answered; closing it");
    }
    Close(c, r > 0 ? "sent a request while one was in flight" : "client left");
    return;
  }
  for (;;) {
    std::string error;
    auto r = kvserver::ReadFrameBytes(c, &error);
    if (r == kvserver::ReadResult::kAgain) {
      // A request started must arrive whole soon (before HELLO the HELLO deadline bounds it).
      if (c.header_got > 0 && c.state == ConnState::kReady) {
        SetDeadline(c, c.frame_started + options_.io_timeout);
      }
      return;
    }
    if (r == kvserver::ReadResult::kEof || r == kvserver::ReadResult::kError) {
      Close(c, r == kvserver::ReadResult::kEof ? nullptr : "connection error");
      return;
    }
    if (r == kvserver::ReadResult::kHeader) {
      const uint32_t limit =
          c.state == ConnState::kHello ? kv::kMaxHelloFrameBytes : kv::kMaxFrameBytes;
      if (c.want > limit) {
        log_bad_.Warn("rendezvous endpoint " + address_ + ": " + c.peer + " announced a " +
                      std::to_string(c.want) + "-byte message (limit " + std::to_string(limit) +
                      (c.state == ConnState::kHello ? " before HELLO" : "") + "); closing it");
        Reply(c, kv::Op::kHello, kv::FrameTooBig(c.want, limit, "rank at " + c.peer), true);
        return;
      }
      if (c.state != ConnState::kHello) {
        const size_t job = job_charged_[c.prefix];
        if (job + c.want > options_.max_buffered_bytes_per_job ||
            charged_ + c.want > options_.max_buffered_bytes) {
          const bool per_job = job + c.want > options_.max_buffered_bytes_per_job;
          log_bad_.Warn("rendezvous endpoint " + address_ + ": refused a " +
                        std::to_string(c.want) + "-byte message from " + c.peer + ": " +
                        (per_job ? "its job's" : "all jobs'") + " messages in flight would pass " +
                        std::to_string(per_job ? options_.max_buffered_bytes_per_job
                                               : options_.max_buffered_bytes) +
                        " bytes");
          Reply(c, kv::Op::kHello,
                Unavailable("the launcher's rendezvous endpoint has too many bytes in flight " +
                            std::string(per_job ? "for job '" + c.prefix + "'" : "") + " (limit " +
                            std::to_string(per_job ? options_.max_buffered_bytes_per_job
                                                   : options_.max_buffered_bytes) +
                            " bytes); send smaller values"),
                true);
          return;
        }
        Charge(c, c.want);
      }
      continue;
    }
    OnFrame(c);  // kFrame
    return;      // one request at a time: its answer comes before the next is read
  }
}

void KvServerImpl::OnFrame(Conn& c) {
  std::string payload = std::move(c.payload);
  c.payload = std::string();
  Charge(c, 0);
  kv::Request req;
  Status s = kv::DecodeRequest(payload, &req);
  if (!s.ok()) {
    log_bad_.Warn("rendezvous endpoint " + address_ + ": malformed message from " + c.peer +
                  "; closing it");
    Reply(c, req.op, s, true);
    return;
  }
  if (c.state == ConnState::kHello || req.op == kv::Op::kHello) {
    if (c.state != ConnState::kHello) {
      Reply(c, req.op, FailedPrecondition("HELLO sent twice on one connection"), true);
      return;
    }
    kv::Response resp;
    resp.status = Hello(req, &resp.value);
    if (!resp.status.ok()) {
      log_bad_.Warn("rendezvous endpoint " + address_ + ": refused " + c.peer + ": " +
                    (req.op == kv::Op::kHello ? "bad HELLO (unknown secret or version)"
                                              : "request before HELLO"));
      Reply(c, req.op, resp, true);
      return;
    }
    c.secret = req.secret;
    c.prefix = resp.value;
    Authenticated(c);
    Reply(c, req.op, resp);
    return;
  }
  // The job may have ended since HELLO: its secret then grants nothing, and its keys are gone.
  std::string prefix;
  if (!resolver_ || !resolver_(c.secret, &prefix) || prefix != c.prefix) {
    Reply(c, req.op,
          PermissionDenied("the job of this connection (keys '" + c.prefix +
                           "...') has ended; its secret no longer grants access"),
          true);
    return;
  }
  Serve(c, req);
}

}  // namespace hvd::launcherd::kvserver
