// The runtime's rendezvous endpoint: one thread per connection, each blocking in its own reads and
// in KvStore::Wait. A connection belongs to one rank for the job's life, so the count is bounded by
// the ranks running (capped at kMaxConnections), and a blocking thread keeps the code as plain as
// the protocol.
//
// Stop() ends every thread promptly: an eventfd wakes blocked reads and writes, and the store's
// Shutdown() wakes blocked waits. That shuts the store down for every user (the gRPC service too),
// so the launcher stops this server only when it stops altogether.
#include "launcherd/kv_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <list>
#include <mutex>
#include <thread>

#include "common/logging.h"
#include "common/settings.h"
#include "common/thread_annotations.h"
#include "rendezvous/kv_protocol.h"
#include "rendezvous/store_util.h"

namespace hvd::launcherd {
namespace {

namespace kv = runtime::rendezvous::kv;
using Clock = std::chrono::steady_clock;
using runtime::rendezvous::internal::ErrnoText;

constexpr size_t kMaxConnections = 4096;
// A rank sends HELLO right after connecting; this bounds how long a stray connection that sends
// nothing holds a thread.
constexpr auto kHelloTimeout = std::chrono::seconds(10);
// A client that does not read its response for this long is dropped.
constexpr auto kWriteTimeout = std::chrono::seconds(10);
// How long a refusal at the connection cap waits for the HELLO it discards (unread input would make
// close() send a reset that can overtake the error frame).
constexpr auto kRefuseReadTimeout = std::chrono::milliseconds(200);

Status PermissionDenied(const std::string& m) {
  return FailedPrecondition("permission denied: " + m);
}

class KvServerImpl final : public KvServer {
 public:
  KvServerImpl(KvStore* store, SecretResolver resolver)
      : store_(store), resolver_(std::move(resolver)) {}
  ~KvServerImpl() override {
    Stop();
    if (listen_fd_ >= 0) close(listen_fd_);
    if (stop_fd_ >= 0) close(stop_fd_);
  }

  Status Listen(const std::string& listen) {
    auto colon = listen.rfind(':');
    int64_t port = -1;
    if (colon == std::string::npos || colon == 0 ||
        !common::ParseInt64(listen.substr(colon + 1), &port).ok() || port < 0 || port > 65535) {
      return InvalidArgument("rendezvous endpoint: listen address '" + listen +
                             "' is not HOST:PORT with a port in 0..65535 (0 picks a free one)");
    }
    const std::string host = listen.substr(0, colon);
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* res = nullptr;
    int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (rc != 0 || res == nullptr) {
      return InvalidArgument("rendezvous endpoint: cannot resolve '" + host +
                             "' to a local IPv4 address: " + gai_strerror(rc));
    }
    sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
    freeaddrinfo(res);
    addr.sin_port = htons(static_cast<uint16_t>(port));

    stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stop_fd_ < 0) return Internal("rendezvous endpoint: eventfd: " + ErrnoText(errno));
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
    address_ = host + ":" + std::to_string(ntohs(addr.sin_port));
    acceptor_ = std::thread([this] { AcceptLoop(); });
    return Status::OK();
  }

  std::string address() const override { return address_; }

  void Stop() override {
    std::call_once(stop_once_, [this] {
      if (!acceptor_.joinable()) return;  // never started: nothing to stop, the store untouched
      uint64_t one = 1;
      (void)!write(stop_fd_, &one, sizeof(one));
      store_->Shutdown();
      acceptor_.join();
      close(listen_fd_);  // new dials are refused at once instead of waiting in the backlog
      listen_fd_ = -1;
      std::list<Conn> conns;
      {
        std::lock_guard<std::mutex> lock(mu_);
        conns.swap(conns_);
      }
      for (Conn& c : conns) c.thread.join();
    });
  }

 private:
  struct Conn {
    std::thread thread;
    std::atomic<bool> done{false};
  };

  void AcceptLoop() {
    for (;;) {
      pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
      int r = poll(fds, 2, -1);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        HVD_LOG(ERROR) << "rendezvous endpoint " << address_ << ": poll: " << ErrnoText(errno)
                       << "; no longer accepting connections";
        return;
      }
      if (fds[1].revents != 0) return;
      sockaddr_in from{};
      socklen_t len = sizeof(from);
      int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // The pending connection keeps the listener readable: back off instead of spinning.
          HVD_LOG(WARNING) << "rendezvous endpoint " << address_ << ": accept: " << ErrnoText(errno)
                           << "; raise the open-file limit (ulimit -n)";
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        continue;  // otherwise the caller gave up before we accepted: keep serving
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      char ip[INET_ADDRSTRLEN] = "?";
      inet_ntop(AF_INET, &from.sin_addr, ip, sizeof(ip));
      Admit(fd, std::string(ip) + ":" + std::to_string(ntohs(from.sin_port)));
    }
  }

  // Starts a connection thread, or refuses the connection with an error frame at the cap.
  void Admit(int fd, const std::string& peer) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->done.load()) {
        it->thread.join();
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
    Status refusal;
    if (conns_.size() >= kMaxConnections) {
      refusal = Unavailable("rendezvous endpoint " + address_ + " has " +
                            std::to_string(kMaxConnections) +
                            " connections open, its limit; retry later or spread jobs over "
                            "several launchers");
    } else {
      Conn& c = conns_.emplace_back();
      try {
        c.thread = std::thread([this, fd, peer, &c] {
          Serve(fd, peer);
          close(fd);
          c.done.store(true);
        });
        return;
      } catch (const std::system_error& e) {
        conns_.pop_back();
        refusal = Unavailable("rendezvous endpoint " + address_ +
                              ": cannot start a connection thread: " + e.what());
      }
    }
    std::string discard;
    (void)kv::ReadFrame(fd, &discard, Clock::now() + kRefuseReadTimeout, stop_fd_, peer);
    Reply(fd, peer, kv::Op::kHello, refusal);
    close(fd);
  }

  bool Reply(int fd, const std::string& peer, kv::Op op, const kv::Response& resp) {
    return kv::WriteFrame(fd, kv::EncodeResponse(op, resp), Clock::now() + kWriteTimeout, stop_fd_,
                          peer)
        .ok();
  }
  bool Reply(int fd, const std::string& peer, kv::Op op, const Status& s) {
    kv::Response resp;
    resp.status = s;
    return Reply(fd, peer, op, resp);
  }

  // Serves one connection until the client leaves, breaks the protocol or the server stops.
  void Serve(int fd, const std::string& peer) {
    std::string prefix;  // empty until HELLO succeeds
    for (;;) {
      std::string payload;
      Status s = kv::ReadFrame(fd, &payload,
                               prefix.empty() ? Clock::now() + kHelloTimeout : kv::Deadline::max(),
                               stop_fd_, "rank at " + peer);
      if (!s.ok()) {
        // Only an oversized frame deserves an answer; a closed or cancelled connection has nobody
        // to tell.
        if (s.code() == StatusCode::kInvalidArgument) Reply(fd, peer, kv::Op::kHello, s);
        return;
      }
      kv::Request req;
      s = kv::DecodeRequest(payload, &req);
      if (!s.ok()) {
        Reply(fd, peer, req.op, s);
        return;
      }
      if (prefix.empty() || req.op == kv::Op::kHello) {
        s = Hello(req, prefix.empty(), &prefix);
        kv::Response resp;
        resp.status = s;
        resp.value = prefix;
        if (!Reply(fd, peer, req.op, resp) || !s.ok()) return;
        continue;
      }
      // A WAIT blocks this thread in the store until its keys arrive, its timeout passes or the
      // store shuts down; a rank that dies meanwhile is noticed at the reply.
      kv::Response resp;
      resp.status = Handle(prefix, req, &resp);
      if (!Reply(fd, peer, req.op, resp)) return;
    }
  }

  Status Hello(const kv::Request& req, bool first, std::string* prefix) {
    if (!first) return FailedPrecondition("HELLO sent twice on one connection");
    if (req.op != kv::Op::kHello) {
      return PermissionDenied(
          "the first request on a rendezvous connection must be HELLO with "
          "the job's secret, not " +
          kv::OpName(req.op));
    }
    if (req.version != kv::kProtocolVersion) {
      return FailedPrecondition("the rank speaks rendezvous protocol version " +
                                std::to_string(req.version) + ", this launcher version " +
                                std::to_string(kv::kProtocolVersion) +
                                "; use libhvd and hvd-launcherd from the same release");
    }
    if (req.secret.empty()) {
      return PermissionDenied(
          "HELLO carried no job secret; set HVD_JOB_SECRET to the job's secret");
    }
    std::string granted;
    if (!resolver_ || !resolver_(req.secret, &granted)) {
      return PermissionDenied(
          "the job secret (HVD_JOB_SECRET) is not one this launcher issued, "
          "or its job has ended; ranks get it from hvd-agent");
    }
    // An empty prefix would grant every job's keys; refuse rather than trust a resolver bug.
    if (granted.empty()) return Internal("the launcher resolved a job secret to an empty prefix");
    *prefix = std::move(granted);
    return Status::OK();
  }

  static Status CheckKey(const std::string& prefix, const std::string& key) {
    if (key.empty() || key.find('\0') != std::string::npos) {
      return InvalidArgument("rendezvous key '" + key + "' is empty or contains a NUL byte");
    }
    if (key.compare(0, prefix.size(), prefix) != 0) {
      return PermissionDenied("key '" + key + "' is outside this job's keys '" + prefix +
                              "...'; a job's secret grants only its own keys (do HVD_JOB_ID and "
                              "HVD_JOB_SECRET belong to the same job?)");
    }
    return Status::OK();
  }

  Status Handle(const std::string& prefix, const kv::Request& req, kv::Response* resp) {
    switch (req.op) {
      case kv::Op::kSet:
        HVD_RETURN_IF_ERROR(CheckKey(prefix, req.key));
        return store_->Set(req.key, req.value);
      case kv::Op::kGet:
        HVD_RETURN_IF_ERROR(CheckKey(prefix, req.key));
        return store_->Get(req.key, &resp->value);
      case kv::Op::kWait: {
        for (const auto& k : req.keys) HVD_RETURN_IF_ERROR(CheckKey(prefix, k));
        Status s = store_->Wait(req.keys, std::chrono::milliseconds(req.timeout_ms));
        // For the rank the endpoint is going away, which is what Unavailable means to it.
        if (s.code() == StatusCode::kCancelled) return Unavailable(s.message());
        return s;
      }
      case kv::Op::kAdd:
        HVD_RETURN_IF_ERROR(CheckKey(prefix, req.key));
        return store_->Add(req.key, req.delta, &resp->number);
      case kv::Op::kCas:
        HVD_RETURN_IF_ERROR(CheckKey(prefix, req.key));
        return store_->CompareAndSet(req.key, req.expect_absent, req.expected, req.desired,
                                     &resp->swapped, &resp->current, &resp->found);
      case kv::Op::kHello:
        break;
    }
    return Internal("rendezvous endpoint: unhandled " + kv::OpName(req.op));
  }

  KvStore* const store_;
  const SecretResolver resolver_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // readable once Stop() began: every blocked read, write and poll ends
  std::string address_;
  std::thread acceptor_;
  std::once_flag stop_once_;
  std::mutex mu_;
  std::list<Conn> conns_ GUARDED_BY(mu_);  // finished ones are joined at the next accept
};

}  // namespace

Status KvServer::Start(const std::string& listen, KvStore* store, SecretResolver resolver,
                       std::unique_ptr<KvServer>* out) {
  if (store == nullptr) return InvalidArgument("rendezvous endpoint: no store given");
  auto server = std::make_unique<KvServerImpl>(store, std::move(resolver));
  HVD_RETURN_IF_ERROR(server->Listen(listen));
  *out = std::move(server);
  return Status::OK();
}

}  // namespace hvd::launcherd
