// tcp::Connect: builds the full mesh through the rendezvous store.
//
// Each rank listens, publishes "<scope>/tcp/<rank>" = "host:port", and then does two things at
// once: an acceptor thread takes connections from every higher rank while this thread dials every
// lower rank. Waiting only on lower ranks before accepting would also terminate (rank 0 accepts
// unconditionally), but it serializes setup into a chain of size - 1 handshakes.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "base/logging.h"
#include "base/net.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/socket_util.h"
#include "transport/tcp/tcp_link.h"
#include "transport/tcp/tcp_transport.h"

namespace hvd::runtime::transport::tcp {
namespace {

using Clock = std::chrono::steady_clock;

// A legitimate peer sends its hello right after connecting; this only bounds how long a stray
// connection that sends nothing can hold up the acceptor.
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
constexpr auto kMaxBackoff = std::chrono::milliseconds(500);
constexpr size_t kMaxListed = 32;  // ranks named per category in a timeout message

std::string AddressKey(const std::string& scope, int rank) {
  return scope + "/tcp/" + std::to_string(rank);
}

std::string AdvertisedHost(const TcpOptions& o) {
  if (!o.advertise_addr.empty()) return o.advertise_addr;
  if (o.bind_addr != "0.0.0.0") return o.bind_addr;
  return base::LocalHostName(/*fallback=*/o.bind_addr);
}

class Mesh {
 public:
  Mesh(rendezvous::Store& store, int rank, int size, const TcpOptions& o,
       const std::vector<bool>& wanted)
      : store_(store),
        rank_(rank),
        size_(size),
        opts_(o),
        wanted_(wanted.empty() ? std::vector<bool>(size, true) : wanted),
        peers_(size),
        last_error_(size) {
    wanted_.resize(size, false);
    wanted_[rank] = false;
  }

  ~Mesh() {
    if (listen_fd_ >= 0) close(listen_fd_);
    if (cancel_fd_ >= 0) close(cancel_fd_);
    for (PeerSocket& p : peers_) {
      if (p.fd >= 0) close(p.fd);
    }
  }

  Status Run(const std::shared_ptr<AbortState>& abort,
             std::vector<std::unique_ptr<PollableLink>>* out) {
    Status s = Build(abort, out);
    if (s.ok()) return s;
    return s.WithContext("tcp mesh for rank " + std::to_string(rank_) + " of " +
                         std::to_string(size_) + " (scope '" + opts_.scope + "', " +
                         store_.Describe() + ")");
  }

 private:
  Status Build(const std::shared_ptr<AbortState>& abort,
               std::vector<std::unique_ptr<PollableLink>>* out) {
    deadline_ = Clock::now() + opts_.connect_timeout;
    cancel_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (cancel_fd_ < 0) return Internal("eventfd: " + ErrnoText(errno));
    int port = 0;
    HVD_RETURN_IF_ERROR(Listen(opts_.bind_addr, opts_.port, opts_.socket_buffer_bytes,
                               std::max(size_, SOMAXCONN), &listen_fd_, &port));
    hello_ = MakeHello(rank_, size_, opts_.scope, port);
    std::string address = AdvertisedHost(opts_) + ":" + std::to_string(port);
    HVD_RETURN_IF_ERROR_CTX(store_.Set(AddressKey(opts_.scope, rank_), address),
                            "publishing this rank's address");

    std::thread acceptor([this] { accept_status_ = AcceptHigher(); });
    Status connect_status = ConnectLower();
    if (!connect_status.ok()) {
      uint64_t one = 1;
      (void)!write(cancel_fd_, &one, sizeof(one));
    }
    acceptor.join();

    Status s = connect_status.ok() ? accept_status_ : connect_status;
    if (s.code() == StatusCode::kDeadlineExceeded) return DeadlineExceeded(DescribeMissing());
    HVD_RETURN_IF_ERROR(s);
    out->resize(size_);
    for (int p = 0; p < size_; ++p) {
      if (peers_[p].fd < 0) continue;
      (*out)[p] = std::make_unique<TcpLink>(peers_[p].fd, p, peers_[p].address, abort);
      peers_[p].fd = -1;  // ownership moved
    }
    HVD_LOG(DEBUG) << "tcp mesh ready: rank " << rank_ << " of " << size_ << " at " << address;
    return Status::OK();
  }

  Status AcceptHigher() {
    int missing = 0;
    for (int r = rank_ + 1; r < size_; ++r) missing += wanted_[r] ? 1 : 0;
    auto expected = [this](int r) {
      return r > rank_ && r < size_ && wanted_[r] && peers_[r].fd < 0;
    };
    while (missing > 0) {
      HVD_RETURN_IF_ERROR(WaitFd(listen_fd_, POLLIN, deadline_, cancel_fd_));
      sockaddr_in from{};
      socklen_t len = sizeof(from);
      int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        // The caller may have given up between its SYN and our accept; keep listening.
        if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
        return Unavailable("accept on port " + std::to_string(hello_.listen_port) + ": " +
                           ErrnoText(errno));
      }
      std::string what = IpText(from) + ":" + std::to_string(ntohs(from.sin_port));
      Hello peer;
      Status s = SetStreamOptions(fd, opts_.socket_buffer_bytes);
      if (s.ok()) {
        s = HandshakeAsAcceptor(fd, hello_, expected, what,
                                std::min(deadline_, Clock::now() + kHandshakeTimeout), cancel_fd_,
                                &peer);
      }
      if (!s.ok()) {
        close(fd);
        if (s.code() == StatusCode::kCancelled) return s;
        // A stray or stale caller must not break the mesh: note it and keep waiting.
        HVD_LOG(WARNING) << "tcp mesh rank " << rank_ << ": " << s.message();
        ++refusals_;
        last_refusal_ = s.message();
        continue;
      }
      peers_[peer.rank] = {fd, IpText(from) + ":" + std::to_string(peer.listen_port)};
      --missing;
    }
    return Status::OK();
  }

  Status ConnectLower() {
    std::vector<int> lower;
    std::vector<std::string> keys;
    for (int p = 0; p < rank_; ++p) {
      if (!wanted_[p]) continue;
      lower.push_back(p);
      keys.push_back(AddressKey(opts_.scope, p));
    }
    if (lower.empty()) return Status::OK();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
    Status s = store_.Wait(keys, std::max(left, std::chrono::milliseconds(0)));
    if (s.code() == StatusCode::kDeadlineExceeded) return s;
    HVD_RETURN_IF_ERROR_CTX(s, "waiting for the addresses of lower ranks");
    for (size_t i = 0; i < lower.size(); ++i) {
      std::string address;
      HVD_RETURN_IF_ERROR(store_.Get(keys[i], &address));
      HVD_RETURN_IF_ERROR(ConnectTo(lower[i], address));
    }
    return Status::OK();
  }

  // Dials rank p until the handshake succeeds, retrying with backoff: the address may be stale or
  // the peer's backlog full for a moment. A refused handshake is final.
  Status ConnectTo(int p, const std::string& address) {
    const std::string what = "rank " + std::to_string(p) + " (" + address + ")";
    base::HostPort hp;
    sockaddr_in addr;
    HVD_RETURN_IF_ERROR_CTX(base::ParseHostPort(address, &hp), "address of " + what);
    // A peer whose published name does not resolve cannot be reached: Unavailable, as any other
    // unreachable peer (Python raises HorovodInternalError, which elastic loops recover from),
    // not base's InvalidArgument, which is about the caller's own input.
    if (Status r = base::ResolveIPv4(hp.host, hp.port, &addr); !r.ok()) {
      return Unavailable("address of " + what + ": " + r.message());
    }
    auto backoff = std::chrono::milliseconds(5);
    for (;;) {
      int fd = -1;
      Status s = ConnectOnce(addr, address, opts_.socket_buffer_bytes, deadline_, -1, &fd);
      if (s.ok()) {
        s = HandshakeAsConnector(fd, hello_, p, what,
                                 std::min(deadline_, Clock::now() + kHandshakeTimeout), -1);
        if (s.ok()) {
          peers_[p] = {fd, address};
          return s;
        }
        close(fd);
        if (s.code() == StatusCode::kFailedPrecondition) return s;
      }
      // A dial cut short by the deadline says less than the failure before it ("refused").
      if (s.code() != StatusCode::kDeadlineExceeded || last_error_[p].empty()) {
        last_error_[p] = s.message();
      }
      auto now = Clock::now();
      if (now >= deadline_) return DeadlineExceeded(what + " never connected");
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline_ - now));
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
  }

  // The timeout message: which ranks never published an address, which never connected.
  std::string DescribeMissing() {
    std::vector<std::string> unpublished, unconnected;
    for (int p = 0; p < size_; ++p) {
      if (!wanted_[p] || peers_[p].fd >= 0) continue;
      std::string address;
      if (!store_.Get(AddressKey(opts_.scope, p), &address).ok()) {
        unpublished.push_back("rank " + std::to_string(p));
        continue;
      }
      std::string entry = "rank " + std::to_string(p) + " (" + address + ")";
      if (!last_error_[p].empty()) entry += " [last error: " + last_error_[p] + "]";
      unconnected.push_back(std::move(entry));
    }
    std::string m = "timed out after " + std::to_string(opts_.connect_timeout.count()) + " ms";
    auto list = [&m](const char* label, const std::vector<std::string>& v) {
      if (v.empty()) return;
      m += "; ";
      m += label;
      for (size_t i = 0; i < v.size() && i < kMaxListed; ++i) m += (i ? ", " : " ") + v[i];
      if (v.size() > kMaxListed) m += " and " + std::to_string(v.size() - kMaxListed) + " more";
    };
    list("never published an address (key '<scope>/tcp/<rank>'):", unpublished);
    list("published an address but never connected:", unconnected);
    if (refusals_ > 0) {
      m += "; refused " + std::to_string(refusals_) + " connection(s), last: " + last_refusal_;
    }
    return m;
  }

  rendezvous::Store& store_;
  const int rank_;
  const int size_;
  const TcpOptions opts_;
  std::vector<bool> wanted_;  // peers to connect to
  Clock::time_point deadline_;
  Hello hello_;
  int listen_fd_ = -1;
  int cancel_fd_ = -1;  // readable: the acceptor stops
  // Index p < rank_ is written by this thread, p > rank_ by the acceptor; join() publishes both.
  std::vector<PeerSocket> peers_;
  std::vector<std::string> last_error_;  // per lower rank, the last failed dial
  Status accept_status_;                 // acceptor's result
  int refusals_ = 0;                     // acceptor's refused callers
  std::string last_refusal_;
};

}  // namespace

Status ConnectLinks(rendezvous::Store& store, int rank, int size, const TcpOptions& options,
                    const std::vector<bool>& peers, std::shared_ptr<AbortState> abort,
                    std::vector<std::unique_ptr<PollableLink>>* links) {
  if (size < 1 || rank < 0 || rank >= size) {
    return InvalidArgument("tcp mesh: rank " + std::to_string(rank) + " of size " +
                           std::to_string(size) + " is out of range");
  }
  links->resize(size);
  bool any = false;
  for (int p = 0; p < size; ++p) {
    any |= p != rank && (peers.empty() || (static_cast<size_t>(p) < peers.size() && peers[p]));
  }
  if (!any) return Status::OK();
  return Mesh(store, rank, size, options, peers).Run(abort, links);
}

Status Connect(rendezvous::Store& store, int rank, int size, const TcpOptions& options,
               std::unique_ptr<Transport>* out) {
  auto abort = std::make_shared<AbortState>();
  std::vector<std::unique_ptr<PollableLink>> links;
  HVD_RETURN_IF_ERROR(ConnectLinks(store, rank, size, options, {}, abort, &links));
  *out = NewLinkTransport(rank, size, std::move(links), std::move(abort), SpinPolicy{});
  return Status::OK();
}

}  // namespace hvd::runtime::transport::tcp
