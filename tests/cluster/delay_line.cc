#include "tests/cluster/delay_line.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>

#include "tests/cluster/netns.h"

namespace hvd::clustertest {
namespace {

using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC, as the timerfd
constexpr int kMtu = 65000;
constexpr size_t kMaxPacket = 65536;

std::string Errno(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// A TUN device named eth0 made inside `ns` (the fd works from any thread).
Status TunIn(const std::string& ns, int* fd) {
  return NetnsCluster::InNamespace(ns, [&]() -> Status {
    *fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0)
      return Unavailable(Errno("open /dev/net/tun (a delay without tc netem needs TUN)"));
    ifreq ifr{};
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    std::strncpy(ifr.ifr_name, "eth0", IFNAMSIZ - 1);
    if (ioctl(*fd, TUNSETIFF, &ifr) != 0) {
      Status s = Unavailable(Errno("TUNSETIFF eth0 in " + ns));
      close(*fd);
      *fd = -1;
      return s;
    }
    return Status::OK();
  });
}

struct Held {
  Clock::time_point due;
  int fd;
  std::vector<char> bytes;
};

}  // namespace

Status DelayLine::Start(const std::vector<DelayPort>& ports, std::chrono::microseconds delay,
                        std::unique_ptr<DelayLine>* out) {
  if (delay.count() < 0) return InvalidArgument("a delay line's delay cannot be negative");
  std::unique_ptr<DelayLine> d(new DelayLine(delay));
  for (const DelayPort& p : ports) {
    in_addr a{};
    if (inet_pton(AF_INET, p.addr.c_str(), &a) != 1) {
      return InvalidArgument("delay line port " + p.ns + ": '" + p.addr +
                             "' is not an IPv4 address");
    }
    int fd = -1;
    HVD_RETURN_IF_ERROR(TunIn(p.ns, &fd));
    d->fds_.push_back(fd);
    d->addrs_.push_back(a.s_addr);
    for (const std::vector<std::string>& cmd : std::vector<std::vector<std::string>>{
             {"ip", "-n", p.ns, "link", "set", "eth0", "mtu", std::to_string(kMtu)},
             {"ip", "-n", p.ns, "addr", "add", p.addr + "/24", "dev", "eth0"},
             {"ip", "-n", p.ns, "link", "set", "eth0", "up"}}) {
      HVD_RETURN_IF_ERROR(NetnsCluster::Run(cmd));
    }
  }
  d->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  d->timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (d->stop_fd_ < 0 || d->timer_fd_ < 0) return Internal(Errno("eventfd/timerfd"));
  d->thread_ = std::thread([p = d.get()] { p->Relay(); });
  *out = std::move(d);
  return Status::OK();
}

DelayLine::~DelayLine() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof(one));
    thread_.join();
  }
  for (int fd : fds_) close(fd);
  if (stop_fd_ >= 0) close(stop_fd_);
  if (timer_fd_ >= 0) close(timer_fd_);
}

void DelayLine::Relay() {
  prctl(PR_SET_TIMERSLACK, 1UL);  // wake-ups on time: the default slack is 50 us
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  auto watch = [ep](int fd, uint64_t tag) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u64 = tag;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
  };
  const uint64_t kStop = fds_.size(), kTimer = fds_.size() + 1;
  for (size_t i = 0; i < fds_.size(); ++i) watch(fds_[i], i);
  watch(stop_fd_, kStop);
  watch(timer_fd_, kTimer);
  std::deque<Held> held;
  std::vector<char> buf(kMaxPacket);
  epoll_event events[16];
  for (;;) {
    const Clock::time_point now = Clock::now();
    while (!held.empty() && held.front().due <= now) {
      const Held& h = held.front();
      // A TUN write hands the packet to the namespace's stack; it fails only for a malformed
      // packet or a device going away, and then the packet is lost, as on a wire.
      if (write(h.fd, h.bytes.data(), h.bytes.size()) < 0)
        dropped_.fetch_add(1);
      else
        relayed_.fetch_add(1, std::memory_order_relaxed);
      held.pop_front();
    }
    itimerspec when{};  // zero: disarmed
    if (!held.empty()) {
      const auto ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(held.front().due.time_since_epoch())
              .count();
      when.it_value.tv_sec = ns / 1000000000;
      when.it_value.tv_nsec = ns % 1000000000;
    }
    timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &when, nullptr);
    const int n = epoll_wait(ep, events, 16, -1);
    for (int k = 0; k < n; ++k) {
      const uint64_t tag = events[k].data.u64;
      if (tag == kStop) {
        close(ep);
        return;
      }
      if (tag == kTimer) {
        uint64_t expirations;
        (void)!read(timer_fd_, &expirations, sizeof(expirations));
        continue;
      }
      for (;;) {  // every packet the port has now
        const ssize_t r = read(fds_[tag], buf.data(), buf.size());
        if (r <= 0) break;  // EAGAIN: drained
        const auto* b = reinterpret_cast<const unsigned char*>(buf.data());
        int to = -1;
        if (r >= 20 && (b[0] >> 4) == 4) {
          uint32_t dst;
          std::memcpy(&dst, b + 16, sizeof(dst));
          for (size_t i = 0; i < addrs_.size(); ++i) {
            if (addrs_[i] == dst) to = static_cast<int>(i);
          }
        }
        if (to < 0) {
          dropped_.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        held.push_back(
            {Clock::now() + delay_, fds_[to], std::vector<char>(buf.data(), buf.data() + r)});
      }
    }
  }
}

}  // namespace hvd::clustertest
