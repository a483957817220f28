// shm::Connect: builds the shared-memory mesh among the ranks of one host through the store.
//
// Three phases, none of which waits on another rank's progress in a cycle (see shm_transport.h):
//   1. dial every lower local rank and send our hello with our fds (needs only its backlog);
//   2. accept every higher local rank: read its hello and fds, answer with ours;
//   3. read every lower rank's answer.
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <random>
#include <thread>

#include "base/hex.h"
#include "base/logging.h"
#include "transport/fd_util.h"
#include "transport/handshake.h"
#include "transport/shm/handshake.h"
#include "transport/shm/shm_link.h"
#include "transport/shm/shm_transport.h"

namespace hvd::runtime::transport::shm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kRefusedRetry = std::chrono::milliseconds(20);
constexpr auto kRetry = std::chrono::milliseconds(2);
// A real peer sends its hello right after connecting; this only bounds a stray caller.
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);

std::string SocketKey(const std::string& scope, int rank) {
  return scope + "/shm/" + std::to_string(rank);
}

sockaddr_un Abstract(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  // sun_path[0] = 0: the abstract namespace, nothing in the filesystem.
  const size_t n = std::min(name.size(), sizeof(a.sun_path) - 1);
  std::memcpy(a.sun_path + 1, name.data(), n);
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

int PeerPid(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? cred.pid : -1;
}

// One local peer during setup.
struct Peer {
  int rank = -1;
  int index = -1;     // local index
  int fd = -1;        // setup socket, then liveness fd
  std::string name;   // its socket name, for messages
  bool done = false;  // hello exchanged both ways
  std::shared_ptr<Segment> segment;
  int doorbell = -1;
};

class Mesh {
 public:
  Mesh(rendezvous::Store& store, int rank, int size, const std::vector<int>& local,
       const ShmOptions& o)
      : store_(store), rank_(rank), size_(size), local_(local), opts_(o) {}

  ~Mesh() {
    if (listen_fd_ >= 0) close(listen_fd_);
    for (Peer& p : peers_) {
      if (p.fd >= 0) close(p.fd);
      if (p.doorbell >= 0) close(p.doorbell);
    }
  }

  Status Run(const std::shared_ptr<AbortState>& abort,
             std::vector<std::unique_ptr<PollableLink>>* out) {
    Status s = Build(abort, out);
    if (s.ok()) return s;
    return s.WithContext("shm mesh for rank " + std::to_string(rank_) + " of " +
                         std::to_string(size_) + " (scope '" + opts_.scope + "', " +
                         store_.Describe() + ")");
  }

 private:
  Status Build(const std::shared_ptr<AbortState>& abort,
               std::vector<std::unique_ptr<PollableLink>>* out) {
    deadline_ = Clock::now() + opts_.connect_timeout;
    const int me =
        static_cast<int>(std::find(local_.begin(), local_.end(), rank_) - local_.begin());
    const int nlocal = static_cast<int>(local_.size());
    if (me == nlocal) return Internal("rank is not among the local ranks");
    for (int i = 0; i < nlocal; ++i) {
      if (i == me) continue;
      Peer p;
      p.rank = local_[i];
      p.index = i;
      peers_.push_back(std::move(p));
    }
    std::unique_ptr<Segment> segment;
    HVD_RETURN_IF_ERROR(
        Segment::Create(SegmentName(rank_), rank_, nlocal, opts_.ring_bytes, &segment));
    mine_ = std::move(segment);
    const int bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (bell < 0) return Unavailable("eventfd: " + ErrnoText(errno));
    doorbell_ = std::make_shared<Doorbell>(bell);
    HVD_RETURN_IF_ERROR(Listen(nlocal));
    hello_ = MakeHello(rank_, size_, opts_.scope, nlocal, opts_.ring_bytes);

    HVD_RETURN_IF_ERROR(DialLower());
    HVD_RETURN_IF_ERROR(AcceptHigher());
    HVD_RETURN_IF_ERROR(ReadAnswers());

    out->resize(size_);
    for (Peer& p : peers_) {
      // 0: the peer's process is not in our pid namespace (it cannot be named to the kernel).
      const int pid = PeerPid(p.fd);
      LinkEnds ends{mine_, p.segment, me, p.index, doorbell_, p.doorbell, p.fd, pid};
      const std::string description = "rank " + std::to_string(p.rank) + " (shm segment '" +
                                      SegmentName(p.rank) + "', pid " + std::to_string(pid) + ")";
      (*out)[p.rank] = std::make_unique<ShmLink>(p.rank, description, std::move(ends), abort);
      p.fd = p.doorbell = -1;  // owned by the link now
    }
    HVD_LOG(DEBUG) << "shm mesh ready: rank " << rank_ << ", " << nlocal << " local ranks";
    return Status::OK();
  }

  std::string SegmentName(int rank) const {
    return "hvd-shm:" + opts_.scope.substr(0, 200) + ":" + std::to_string(rank);
  }

  Status Listen(int nlocal) {
    std::random_device random;
    const std::string name = "hvd-shm/" + base::Hex(ScopeHash(opts_.scope), 16) + "/" +
                             std::to_string(getpid()) + "/" + std::to_string(rank_) + "/" +
                             base::Hex((uint64_t{random()} << 32) | random(), 16);
    listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) return Unavailable("socket(AF_UNIX): " + ErrnoText(errno));
    socklen_t len;
    sockaddr_un addr = Abstract(name, &len);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      return Unavailable("bind @" + name + ": " + ErrnoText(errno));
    }
    if (listen(listen_fd_, std::max(nlocal, SOMAXCONN)) != 0) {
      return Unavailable("listen @" + name + ": " + ErrnoText(errno));
    }
    return store_.Set(SocketKey(opts_.scope, rank_), name)
        .WithContext("publishing this rank's shm socket");
  }

  Status DialLower() {
    std::vector<std::string> keys;
    for (const Peer& p : peers_) {
      if (p.rank < rank_) keys.push_back(SocketKey(opts_.scope, p.rank));
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
    Status s = store_.Wait(keys, std::max(left, std::chrono::milliseconds(0)));
    if (s.code() == StatusCode::kDeadlineExceeded) return DeadlineExceeded(DescribeMissing());
    HVD_RETURN_IF_ERROR_CTX(s, "waiting for the shm sockets of lower local ranks");
    for (Peer& p : peers_) {
      if (p.rank > rank_) continue;
      HVD_RETURN_IF_ERROR(store_.Get(SocketKey(opts_.scope, p.rank), &p.name));
      HVD_RETURN_IF_ERROR(Dial(&p));
      HVD_RETURN_IF_ERROR(SendHello(p.fd, hello_, mine_->fd(), doorbell_->fd, deadline_, Who(p)));
    }
    return Status::OK();
  }

  // Connects to p's socket, retrying while its backlog is full, and while nobody listens there:
  // a store reused from an earlier run (one file:// directory for every run) holds that run's
  // name until p publishes its own, which it may not have done yet.
  Status Dial(Peer* p) {
    socklen_t len;
    sockaddr_un addr = Abstract(p->name, &len);
    for (;;) {
      int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) return Unavailable("socket(AF_UNIX): " + ErrnoText(errno));
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0) {
        p->fd = fd;
        return Status::OK();
      }
      const int err = errno;
      close(fd);
      if (err != EAGAIN && err != EINTR && err != ECONNREFUSED) {
        return Unavailable("connect to " + Who(*p) + " at @" + p->name + ": " + ErrnoText(err));
      }
      if (Clock::now() >= deadline_) {
        return DeadlineExceeded(
            DescribeMissing() +
            (err != ECONNREFUSED
                 ? ""
                 : "; connecting to " + Who(*p) + " at @" + p->name +
                       " was refused until then: nobody listens there (the rank exited, or the "
                       "rendezvous store holds its name from an earlier run: give each run a "
                       "fresh HVD_RENDEZVOUS=file:// directory)"));
      }
      std::string name;
      if (err == ECONNREFUSED && store_.Get(SocketKey(opts_.scope, p->rank), &name).ok() &&
          name != p->name) {
        p->name = name;
        addr = Abstract(p->name, &len);
        continue;
      }
      std::this_thread::sleep_for(err == ECONNREFUSED ? kRefusedRetry : kRetry);
    }
  }

  Status AcceptHigher() {
    int missing = 0;
    for (const Peer& p : peers_) missing += p.rank > rank_ ? 1 : 0;
    while (missing > 0) {
      Status s = WaitFd(listen_fd_, POLLIN, deadline_, -1);
      if (s.code() == StatusCode::kDeadlineExceeded) return DeadlineExceeded(DescribeMissing());
      HVD_RETURN_IF_ERROR(s);
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
        return Unavailable("accept on the shm socket: " + ErrnoText(errno));
      }
      Hello theirs;
      int seg_fd = -1, bell_fd = -1;
      const std::string what = "a local process (pid " + std::to_string(PeerPid(fd)) + ")";
      s = RecvHello(fd, &theirs, &seg_fd, &bell_fd,
                    std::min(deadline_, Clock::now() + kHandshakeTimeout), what);
      Peer* p = nullptr;
      Refusal code = Refusal::kAccepted;
      if (s.ok()) {
        auto it = std::find_if(peers_.begin(), peers_.end(),
                               [&](const Peer& q) { return q.rank == theirs.rank; });
        code = CheckCaller(hello_, theirs, [&](int) {
          return !(it == peers_.end() || it->rank < rank_ || it->done);
        });
        if (code == Refusal::kAccepted) p = &*it;
      }
      Hello reply = hello_;
      reply.status = static_cast<uint32_t>(code);
      if (s.ok()) {
        s = SendHello(fd, reply, p ? mine_->fd() : -1, doorbell_->fd, deadline_, what);
      }
      if (s.ok() && p != nullptr) {
        p->fd = fd;
        p->doorbell = bell_fd;
        s = MapPeer(p, seg_fd);
        seg_fd = -1;
        if (!s.ok()) return s;
        --missing;
        continue;
      }
      // A stray or refused caller must not break the mesh: note it and keep waiting.
      if (seg_fd >= 0) close(seg_fd);
      if (bell_fd >= 0) close(bell_fd);
      close(fd);
      HVD_LOG(WARNING) << "shm mesh rank " << rank_ << ": "
                       << (s.ok() ? CallerRefused(code, hello_, theirs, what).message()
                                  : "refused " + what + ": " + s.message());
    }
    return Status::OK();
  }

  Status ReadAnswers() {
    for (Peer& p : peers_) {
      if (p.rank > rank_) continue;
      Hello theirs;
      int seg_fd = -1;
      Status s = RecvHello(p.fd, &theirs, &seg_fd, &p.doorbell, deadline_, Who(p));
      if (s.code() == StatusCode::kDeadlineExceeded) return DeadlineExceeded(DescribeMissing());
      HVD_RETURN_IF_ERROR(s);
      s = CheckReply(hello_, theirs, p.rank, Who(p));
      if (s.ok() && seg_fd < 0) {
        s = FailedPrecondition("shm handshake with " + Who(p) + ": sent no segment");
      }
      if (!s.ok()) {
        if (seg_fd >= 0) close(seg_fd);
        return s;
      }
      HVD_RETURN_IF_ERROR(MapPeer(&p, seg_fd));
    }
    return Status::OK();
  }

  Status MapPeer(Peer* p, int seg_fd) {
    if (seg_fd < 0 || p->doorbell < 0) {
      return FailedPrecondition("shm handshake with " + Who(*p) + ": no segment or doorbell fd");
    }
    std::unique_ptr<Segment> seg;
    HVD_RETURN_IF_ERROR(Segment::Map(seg_fd, SegmentName(p->rank), p->rank,
                                     static_cast<int>(local_.size()), opts_.ring_bytes, &seg));
    p->segment = std::move(seg);
    p->done = true;
    return Status::OK();
  }

  std::string Who(const Peer& p) const { return "rank " + std::to_string(p.rank); }

  std::string DescribeMissing() {
    std::string unpublished, silent;
    for (const Peer& p : peers_) {
      if (p.done) continue;
      std::string name;
      std::string& list =
          store_.Get(SocketKey(opts_.scope, p.rank), &name).ok() ? silent : unpublished;
      list += (list.empty() ? "" : ", ") + Who(p);
    }
    std::string m = "timed out after " + std::to_string(opts_.connect_timeout.count()) + " ms";
    if (!unpublished.empty()) {
      m += "; never published a shm socket (key '<scope>/shm/<rank>'): " + unpublished;
    }
    if (!silent.empty())
      m += "; published a shm socket but never completed the handshake: " + silent;
    return m;
  }

  rendezvous::Store& store_;
  const int rank_;
  const int size_;
  const std::vector<int> local_;
  const ShmOptions opts_;
  Clock::time_point deadline_;
  Hello hello_;
  int listen_fd_ = -1;
  std::shared_ptr<Segment> mine_;
  std::shared_ptr<Doorbell> doorbell_;
  std::vector<Peer> peers_;
};

Status CheckOptions(const ShmOptions& o) {
  if (o.ring_bytes < 4096 || (o.ring_bytes & (o.ring_bytes - 1)) != 0) {
    return InvalidArgument("shm ring size " + std::to_string(o.ring_bytes) +
                           " bytes must be a power of two >= 4096 (HVD_SHM_RING_BYTES)");
  }
  return Status::OK();
}

}  // namespace

Status ConnectLinks(rendezvous::Store& store, int rank, int size, const std::vector<int>& local,
                    const ShmOptions& options, std::shared_ptr<AbortState> abort,
                    std::vector<std::unique_ptr<PollableLink>>* links) {
  HVD_RETURN_IF_ERROR(CheckOptions(options));
  links->resize(size);
  if (local.size() <= 1) return Status::OK();
  return Mesh(store, rank, size, local, options).Run(abort, links);
}

Status Connect(rendezvous::Store& store, int rank, int size, const ShmOptions& options,
               std::unique_ptr<Transport>* out) {
  if (size < 1 || rank < 0 || rank >= size) {
    return InvalidArgument("shm mesh: rank " + std::to_string(rank) + " of size " +
                           std::to_string(size) + " is out of range");
  }
  std::vector<int> all(size);
  for (int r = 0; r < size; ++r) all[r] = r;
  auto abort = std::make_shared<AbortState>();
  std::vector<std::unique_ptr<PollableLink>> links;
  HVD_RETURN_IF_ERROR(ConnectLinks(store, rank, size, all, options, abort, &links));
  *out = NewLinkTransport(rank, size, std::move(links), std::move(abort),
                          SpinFor(static_cast<size_t>(size), options.spin));
  return Status::OK();
}

}  // namespace hvd::runtime::transport::shm
