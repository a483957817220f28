// The hvd:// Store: the runtime's client for hvd-launcherd's rendezvous endpoint, speaking the
// framed protocol of base/kv_protocol.h over one TCP connection (the runtime never links gRPC).
//
// One connection per store, opened and authenticated (HELLO with HVD_JOB_SECRET) when the store is
// opened, so a wrong address or secret fails hvd::Init() at once with a message that says so.
// Calls are serialized by a mutex: the runtime makes them from one thread at a time, and a blocked
// Wait holds the connection. A lost connection is final: the launcher's store lives in its memory,
// so reconnecting silently could only meet a restarted launcher that forgot every key; every later
// call fails with Unavailable naming the launcher and the first error. The one exception is the
// launcher's own notice that it closes an idle connection (kv::kNoticeByte): the same launcher,
// which processed nothing that crossed the notice, so the call reconnects and is sent again.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "base/errno_text.h"
#include "base/kv_protocol.h"
#include "base/mutex.h"
#include "base/net.h"
#include "base/settings.h"
#include "base/thread_annotations.h"
#include "rendezvous/store.h"
#include "rendezvous/tls_channel.h"

namespace hvd::runtime::rendezvous {
namespace {

namespace kv = base::kv;
using Clock = std::chrono::steady_clock;
using base::ErrnoText;
using kv::Deadline;
using kv::Op;

const base::Setting<std::string> kJobSecret(
    "HVD_JOB_SECRET", nullptr, "",
    "the job's secret for an hvd:// rendezvous (hvd-agent sets it); grants this job's keys only",
    base::kSecret);
const base::Setting<std::string> kRendezvousCa(
    "HVD_RENDEZVOUS_CA", nullptr, "",
    "hvds:// rendezvous: the CA certificate(s) the launcher's certificate must be signed by, as "
    "PEM "
    "text or a file's path (hvd-agent sets it from its --tls-ca)");
const base::Setting<std::string> kRendezvousCrl(
    "HVD_RENDEZVOUS_CRL", nullptr, "",
    "hvds:// rendezvous: certificate revocation list(s), PEM text; a launcher certificate they "
    "list "
    "is refused (hvd-agent sets it from its --tls-crl)");
const base::Setting<double> kRendezvousTimeout(
    "HVD_RENDEZVOUS_TIMEOUT_SECONDS", nullptr, 30,
    "hvd:// rendezvous: how long a rank retries reaching the launcher, and the longest any store "
    "call but a wait may take",
    {0.001, 365 * 24 * 3600.0, "give seconds above 0, or unset it for the default"});

constexpr auto kMaxBackoff = std::chrono::milliseconds(500);
constexpr auto kMaxDialTime = std::chrono::seconds(5);  // one connect attempt
// Keeps deadline arithmetic far from overflow; no rendezvous waits a week.
constexpr auto kMaxWait = std::chrono::milliseconds(std::chrono::hours(24 * 7));

class TcpStore final : public Store {
 public:
  // `tls`: null for hvd:// (plain TCP), the trusted CA for hvds://.
  TcpStore(std::string address, std::string host, int port, std::string secret,
           std::chrono::milliseconds op_timeout, std::shared_ptr<TlsClientContext> tls)
      : address_(std::move(address)),
        name_(std::string(tls ? "launcher rendezvous (TLS) at " : "launcher rendezvous at ") +
              address_),
        tls_context_(std::move(tls)),
        host_(std::move(host)),
        port_(port),
        secret_(std::move(secret)),
        op_timeout_(op_timeout) {}
  ~TcpStore() override {
    base::MutexLock lock(&mu_);
    CloseLocked();
  }

  Status Connect(Deadline deadline) {
    base::MutexLock lock(&mu_);
    return ConnectLocked(deadline);
  }

  Status Set(std::string_view key, std::string_view value) override {
    kv::Request r;
    r.op = Op::kSet;
    r.key = key;
    r.value = value;
    kv::Response resp;
    return Call(r, Clock::now() + op_timeout_, &resp);
  }

  Status Get(std::string_view key, std::string* value) override {
    kv::Request r;
    r.op = Op::kGet;
    r.key = key;
    kv::Response resp;
    HVD_RETURN_IF_ERROR(Call(r, Clock::now() + op_timeout_, &resp));
    *value = std::move(resp.value);
    return Status::OK();
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    kv::Request r;
    r.op = Op::kWait;
    r.keys = keys;
    r.timeout_ms = std::clamp<int64_t>(timeout.count(), 0, kMaxWait.count());
    kv::Response resp;
    // The launcher ends the wait; the socket deadline only catches a launcher that stopped
    // answering.
    return Call(r, Clock::now() + std::chrono::milliseconds(r.timeout_ms) + op_timeout_, &resp);
  }

  Status Add(std::string_view key, int64_t delta, int64_t* new_value) override {
    kv::Request r;
    r.op = Op::kAdd;
    r.key = key;
    r.delta = delta;
    kv::Response resp;
    HVD_RETURN_IF_ERROR(Call(r, Clock::now() + op_timeout_, &resp));
    if (new_value != nullptr) *new_value = resp.number;
    return Status::OK();
  }

  std::string Describe() const override { return name_; }

 private:
  // Dials and authenticates, retrying refused or failed dials (the launcher may still be
  // starting) and a full endpoint until `deadline`. A refused secret is final.
  Status ConnectLocked(Deadline deadline) HVD_REQUIRES(mu_) {
    auto backoff = std::chrono::milliseconds(10);
    std::string last_error;
    for (;;) {
      Status s = ConnectOnceLocked(deadline);
      if (s.ok()) return s;
      if (s.code() != StatusCode::kUnavailable && s.code() != StatusCode::kDeadlineExceeded) {
        return s;
      }
      if (s.code() != StatusCode::kDeadlineExceeded || last_error.empty()) {
        last_error = s.message();
        if (last_error.rfind(name_ + ": ", 0) == 0) last_error.erase(0, name_.size() + 2);
      }
      auto now = Clock::now();
      if (now >= deadline) {
        return Unavailable(name_ + ": could not connect within " +
                           std::to_string(op_timeout_.count()) +
                           " ms (HVD_RENDEZVOUS_TIMEOUT_SECONDS); last error: " + last_error +
                           ". Is hvd-launcherd running and reachable from this host?");
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
  }

  Status ConnectOnceLocked(Deadline deadline) HVD_REQUIRES(mu_) {
    sockaddr_in addr{};
    HVD_RETURN_IF_ERROR(Resolve(host_, port_, &addr));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return Internal(name_ + ": socket: " + ErrnoText(errno));
    Status s = Dial(fd, addr, std::min<Deadline>(deadline, Clock::now() + kMaxDialTime));
    if (s.ok()) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      fd_ = fd;
      if (tls_context_) {
        s = tls_context_->Connect(fd, host_, address_,
                                  std::min<Deadline>(deadline, Clock::now() + op_timeout_), &tls_);
        if (!s.ok()) {
          fd_ = -1;
          close(fd);
          return s.WithContext(name_);
        }
      }
      kv::Request r;
      r.op = Op::kHello;
      r.secret = secret_;
      kv::Response resp;
      s = CallLocked(r, std::min<Deadline>(deadline, Clock::now() + op_timeout_), &resp);
      if (s.ok()) return s;
      CloseLocked();  // CallLocked closed it already on an I/O error
      lost_.clear();
      return s;
    }
    close(fd);
    return s;
  }

  Status Resolve(const std::string& host, int port, sockaddr_in* addr) {
    Status s = base::ResolveIPv4(host, port, addr);
    if (s.ok()) return s;
    const std::string m = name_ + ": " + s.message();
    // A name that does not exist will not appear by retrying; a DNS hiccup may pass.
    return s.code() == StatusCode::kUnavailable ? Unavailable(m)
                                                : InvalidArgument(m + " (check HVD_RENDEZVOUS)");
  }

  Status Dial(int fd, const sockaddr_in& addr, Deadline deadline) {
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
      return Status::OK();
    }
    if (errno != EINPROGRESS && errno != EINTR) {
      return Unavailable("connect " + address_ + ": " + ErrnoText(errno));
    }
    for (;;) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return DeadlineExceeded("connect " + address_ + ": timed out");
      pollfd p{fd, POLLOUT, 0};
      int r = poll(&p, 1, static_cast<int>(left.count()));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Internal("poll for connect " + address_ + ": " + ErrnoText(errno));
      if (r == 0) continue;
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) return Unavailable("connect " + address_ + ": " + ErrnoText(err));
      return Status::OK();
    }
  }

  Status Call(const kv::Request& r, Deadline deadline, kv::Response* resp) {
    base::MutexLock lock(&mu_);
    return CallLocked(r, deadline, resp);
  }

  // One request and its response. Transport failures close the connection for good and give
  // Unavailable; the launcher's own error comes back as it sent it. Both name the launcher and op.
  Status CallLocked(const kv::Request& r, Deadline deadline, kv::Response* resp) HVD_REQUIRES(mu_) {
    const std::string what = name_ + ": " + kv::OpName(r.op);
    if (fd_ < 0) {
      return Unavailable(what + ": the connection was lost earlier (" + lost_ +
                         "); the launcher's keys cannot be reached again from this process");
    }
    std::string request = kv::EncodeRequest(r);
    if (request.size() > kv::kMaxFrameBytes) {  // refused before a byte is sent: still usable
      return InvalidArgument(what + ": request of " + std::to_string(request.size()) +
                             " bytes exceeds the protocol's limit of " +
                             std::to_string(kv::kMaxFrameBytes >> 20) + " MiB");
    }
    std::string payload, notice;
    Status s;
    // At most one reconnection per call: a launcher that closes a fresh connection as idle is
    // misconfigured, and the second notice fails the call like any lost connection.
    for (int tries = 0;; ++tries) {
      // A launcher that closed this connection while it was idle left its notice unread.
      if (r.op != Op::kHello) s = PendingNoticeLocked(deadline, &notice);
      if (s.ok() && notice.empty()) s = WriteFrameLocked(request, deadline);
      if (s.ok() && notice.empty()) s = ReadFrameLocked(&payload, deadline);
      if (s.ok() && notice.empty() && r.op != Op::kHello) kv::DecodeNotice(payload, &notice);
      if (!s.ok() || notice.empty() || tries > 0) break;
      CloseLocked();
      s = ConnectLocked(std::min<Deadline>(deadline, Clock::now() + op_timeout_));
      if (!s.ok()) {
        lost_ = "reconnecting after the launcher closed the connection (" + notice +
                "): " + s.message();
        return Unavailable(what + ": " + lost_);
      }
      notice.clear();
    }
    if (s.ok() && !notice.empty()) s = Unavailable("the launcher closed the connection: " + notice);
    if (s.ok()) s = kv::DecodeResponse(r.op, payload, resp);
    if (!s.ok()) {
      CloseLocked();
      if (s.code() == StatusCode::kDeadlineExceeded) {
        s = Status(s.code(),
                   "no answer from the launcher within the deadline (" + s.message() + ")");
      }
      lost_ = kv::OpName(r.op) + ": " + s.message();
      return Unavailable(what + ": " + s.message());
    }
    return resp->status.WithContext(what);
  }

  // Between calls the launcher sends nothing but a notice that it closes the connection: reads it
  // into *notice if it is there. An error means the connection is gone without one.
  Status PendingNoticeLocked(Deadline deadline, std::string* notice) HVD_REQUIRES(mu_) {
    if (tls_) {
      if (!tls_->Readable()) return Status::OK();
    } else {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 0) <= 0) return Status::OK();
    }
    std::string payload;
    HVD_RETURN_IF_ERROR(ReadFrameLocked(&payload, deadline));
    if (!kv::DecodeNotice(payload, notice)) {
      return Internal("the launcher sent a message nobody asked for");
    }
    return Status::OK();
  }

  Status WriteFrameLocked(std::string_view payload, Deadline deadline) HVD_REQUIRES(mu_) {
    if (tls_) return tls_->WriteFrame(payload, deadline);
    return kv::WriteFrame(fd_, payload, deadline, -1, address_);
  }

  Status ReadFrameLocked(std::string* payload, Deadline deadline) HVD_REQUIRES(mu_) {
    if (tls_) return tls_->ReadFrame(payload, deadline);
    return kv::ReadFrame(fd_, payload, deadline, -1, address_);
  }

  void CloseLocked() HVD_REQUIRES(mu_) {
    tls_.reset();  // before its socket
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  const std::string address_;
  const std::string name_;
  const std::shared_ptr<TlsClientContext> tls_context_;
  const std::string host_;
  const int port_;
  const std::string secret_;
  const std::chrono::milliseconds op_timeout_;
  base::Mutex mu_;
  int fd_ HVD_GUARDED_BY(mu_) = -1;
  std::unique_ptr<TlsChannel> tls_ HVD_GUARDED_BY(mu_);  // hvds://: the session over fd_
  std::string lost_ HVD_GUARDED_BY(mu_);                 // why the connection closed
};

}  // namespace

// HVD_RENDEZVOUS_CA's certificates: the PEM text itself, or a file's path.
Status RendezvousCa(std::shared_ptr<TlsClientContext>* out) {
  std::string value;
  HVD_RETURN_IF_ERROR(kRendezvousCa.Get(&value));
  if (value.empty()) {
    return FailedPrecondition(
        "HVD_RENDEZVOUS names a TLS endpoint (hvds://) but HVD_RENDEZVOUS_CA is not set: it holds "
        "the cluster CA (PEM text or a file's path) that signed the launcher's certificate; "
        "hvd-agent sets it from its --tls-ca");
  }
  std::string source = "HVD_RENDEZVOUS_CA";
  if (value.find("-----BEGIN") == std::string::npos) {
    const std::string path = value;
    FILE* f = std::fopen(path.c_str(), "re");
    if (f == nullptr) {
      return FailedPrecondition("HVD_RENDEZVOUS_CA=" + path + ": " + ErrnoText(errno) +
                                " (it holds PEM text or the path of a PEM file)");
    }
    value.clear();
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && value.size() < (1u << 20)) {
      value.append(buf, n);
    }
    std::fclose(f);
    source += "=" + path;
  }
  std::string crl;
  HVD_RETURN_IF_ERROR(kRendezvousCrl.Get(&crl));
  return TlsClientContext::New(value, source, crl, out);
}

Status NewTcpStore(const std::string& address, bool tls, std::unique_ptr<Store>* out) {
  base::HostPort hp;
  if (!base::ParseHostPort(address, &hp).ok()) {
    return InvalidArgument("launcher rendezvous address '" + address +
                           "' is not HOST:PORT with a port in 1..65535 (expected "
                           "hvd://HOST:PORT in HVD_RENDEZVOUS)");
  }
  std::string secret;
  double timeout_s = 0;
  HVD_RETURN_IF_ERROR(JobSecret(&secret));  // HVD_JOB_SECRET_FD or _FILE (store.h)
  if (secret.empty()) HVD_RETURN_IF_ERROR(kJobSecret.Get(&secret));
  HVD_RETURN_IF_ERROR(kRendezvousTimeout.Get(&timeout_s));
  if (secret.empty()) {
    return FailedPrecondition("launcher rendezvous at " + address +
                              ": HVD_JOB_SECRET is not set; the launcher admits only ranks that "
                              "carry their job's secret (hvd-agent sets it for the ranks it "
                              "starts; set it yourself when starting ranks by hand)");
  }
  std::shared_ptr<TlsClientContext> tls_context;
  if (tls) HVD_RETURN_IF_ERROR(RendezvousCa(&tls_context));
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  auto store = std::make_unique<TcpStore>(address, hp.host, hp.port, secret, timeout,
                                          std::move(tls_context));
  HVD_RETURN_IF_ERROR(store->Connect(Clock::now() + timeout));
  *out = std::move(store);
  return Status::OK();
}

}  // namespace hvd::runtime::rendezvous
