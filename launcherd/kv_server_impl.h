// KvServer's implementation class, shared by kv_server.cc (listener, event loop, reading) and
// kv_server_serve.cc (requests, replies, timers, closing). Internal to those two files.
#pragma once

#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/kv_protocol.h"
#include "base/logging.h"
#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "control/log_escape.h"
#include "launcherd/kv_connection.h"
#include "launcherd/kv_server.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace hvd::launcherd::kvserver {

namespace kv = base::kv;

inline constexpr auto kMaxWait = std::chrono::hours(24 * 7);  // as the client clamps it
// How long a closing connection is drained before close(), so that its last frame is not overtaken
// by a reset (unread input makes close() send one).
inline constexpr auto kLinger = std::chrono::seconds(1);
// Refused connections being answered at once, beyond max_connections; more are closed unanswered.
inline constexpr size_t kMaxRefusing = 64;
inline constexpr auto kLogEvery = std::chrono::seconds(10);  // per kind of refusal
inline constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
inline constexpr uint64_t kListenTag = 0, kStopTag = 1, kWakeTag = 2, kFirstConn = 16;

inline Status PermissionDenied(const std::string& m) {
  return FailedPrecondition("permission denied: " + m);
}

// One log line per kind of refusal per kLogEvery, counting what it left out (control's
// RateLimitedLog, keyed by the kind): a flood of refusals must not become a flood of log lines.
class KindLog {
 public:
  explicit KindLog(std::string kind) : kind_(std::move(kind)), log_(kLogEvery) {}
  void Warn(const std::string& line) { log_.Warn(kind_, line); }

 private:
  const std::string kind_;
  control::RateLimitedLog log_;
};

// Where WaitAsync callbacks, run on whichever thread ends a wait, leave their results for the
// loop. Shared with the callbacks so that one running late never touches a stopped server.
struct Mailbox {
  struct Done {
    uint64_t conn, seq;
    Status status;
  };
  ~Mailbox() {
    if (wake_fd >= 0) close(wake_fd);
  }
  void Post(uint64_t conn, uint64_t seq, const Status& s) {
    {
      base::MutexLock lock(&mu);
      done.push_back({conn, seq, s});
    }
    uint64_t one = 1;
    (void)!write(wake_fd, &one, sizeof(one));
  }
  base::Mutex mu;
  std::vector<Done> done HVD_GUARDED_BY(mu);
  int wake_fd = -1;
};

class KvServerImpl final : public KvServer {
 public:
  KvServerImpl(KvStore* store, SecretResolver resolver, const KvServerOptions& options)
      : store_(store),
        resolver_(std::move(resolver)),
        options_(options),
        mailbox_(std::make_shared<Mailbox>()) {}
  ~KvServerImpl() override;  // Stop(), then the descriptors and the TLS context

  Status Listen(const std::string& listen);
  std::string address() const override { return address_; }

  KvServerStats stats() const override {
    base::MutexLock lock(&stats_mu_);
    return stats_;
  }

  void Stop() override {
    std::call_once(stop_once_, [this] {
      if (!loop_.joinable()) return;  // never started
      uint64_t one = 1;
      (void)!write(stop_fd_, &one, sizeof(one));
      loop_.join();
      close(listen_fd_);  // new dials are refused at once instead of waiting in the backlog
      listen_fd_ = -1;
    });
  }

 private:
  void Loop();
  void Accept();
  void Admit(int fd, const std::string& peer);
  void OnEvent(Conn& c, uint32_t events);
  void OnFrame(Conn& c);
  void Serve(Conn& c, const kv::Request& req);
  void StartWait(Conn& c, const kv::Request& req);
  void DeliverWaits();
  void OnTimer(Conn& c, Clock::time_point now);
  Status Hello(const kv::Request& req, std::string* prefix);
  Status Handle(const std::string& prefix, const kv::Request& req, kv::Response* resp);

  void Reply(Conn& c, kv::Op op, const kv::Response& resp, bool then_close = false);
  void Reply(Conn& c, kv::Op op, const Status& s, bool then_close = false) {
    kv::Response resp;
    resp.status = s;
    Reply(c, op, resp, then_close);
  }
  void Send(Conn& c, std::string frame, bool then_close);
  void Flush(Conn& c);
  void Close(Conn& c, const char* why);
  void SetDeadline(Conn& c, Clock::time_point at);
  void Arm(Conn& c, bool want_write);
  void Charge(Conn& c, size_t bytes);
  void Authenticated(Conn& c);
  // The TLS handshake's next step; false when `c` is closed or must wait for more bytes.
  bool StepHandshake(Conn& c, uint32_t* events);
  void UpdateStats();

  KvStore* const store_;
  const SecretResolver resolver_;
  const KvServerOptions options_;
  std::shared_ptr<Mailbox> mailbox_;
  int listen_fd_ = -1, stop_fd_ = -1, epoll_fd_ = -1;
  SSL_CTX* ssl_ctx_ = nullptr;  // options_.tls enabled
  std::string address_;
  std::thread loop_;
  std::once_flag stop_once_;

  // Owned by the loop thread.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::set<std::pair<Clock::time_point, uint64_t>> timers_;
  std::list<uint64_t> unauth_;  // oldest first
  std::map<std::string, size_t> job_charged_;
  size_t charged_ = 0, refusing_ = 0, waiting_ = 0;
  uint64_t next_id_ = kFirstConn;
  Clock::time_point listen_paused_until_;
  KindLog log_refused_{"refused connections"}, log_evicted_{"closed connections"};
  KindLog log_bad_{"malformed requests"}, log_timeout_{"timed-out connections"};
  KindLog log_tls_{"failed TLS handshakes"};

  mutable base::Mutex stats_mu_;
  KvServerStats stats_ HVD_GUARDED_BY(stats_mu_);
};

}  // namespace hvd::launcherd::kvserver
