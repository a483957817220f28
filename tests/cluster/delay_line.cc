#include "tests/cluster/delay_line.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>

#include "base/errno_text.h"
#include "tests/cluster/netns.h"

namespace hvd::clustertest {
namespace {

using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC, as the timerfd
constexpr int kMtu = 65000;
constexpr size_t kMaxPacket = 65536;
constexpr int kReadsPerWake = 32;

std::string Errno(const std::string& what) {
  return what + ": " + base::ErrnoText(errno);
}

// Whether `err` says this machine lets no one make TUN devices (rather than that something broke).
bool Missing(int err) {
  return err == ENOENT || err == ENODEV || err == ENXIO || err == EPERM || err == EACCES;
}

// A TUN device named eth0 made inside `ns` (the fd works from any thread).
Status TunIn(const std::string& ns, int* fd) {
  return NetnsCluster::InNamespace(ns, [&]() -> Status {
    *fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0) {
      // No TUN here (a container without /dev/net/tun): a setup this machine cannot make.
      const std::string m = Errno("open /dev/net/tun (a delay without tc netem needs TUN)");
      return Missing(errno) ? FailedPrecondition(m) : Unavailable(m);
    }
    ifreq ifr{};
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    std::strncpy(ifr.ifr_name, "eth0", IFNAMSIZ - 1);
    if (ioctl(*fd, TUNSETIFF, &ifr) != 0) {
      const std::string m = Errno("TUNSETIFF eth0 in " + ns);
      Status s = Missing(errno) ? FailedPrecondition(m) : Unavailable(m);
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
  d->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  d->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  d->timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (d->epoll_fd_ < 0 || d->stop_fd_ < 0 || d->timer_fd_ < 0) {
    return Internal(Errno("epoll_create1/eventfd/timerfd_create"));
  }
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
  const uint64_t n = d->fds_.size();
  for (uint64_t tag = 0; tag < n + 2; ++tag) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u64 = tag;  // a port's index; n: the stop eventfd; n + 1: the timer
    const int fd = tag < n ? d->fds_[tag] : tag == n ? d->stop_fd_ : d->timer_fd_;
    if (epoll_ctl(d->epoll_fd_, EPOLL_CTL_ADD, fd, &e) != 0) return Internal(Errno("epoll_ctl"));
  }
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
  for (int fd : {epoll_fd_, stop_fd_, timer_fd_}) {
    if (fd >= 0) close(fd);
  }
}

void DelayLine::Relay() {
  const uint64_t kStop = fds_.size(), kTimer = fds_.size() + 1;
  std::deque<Held> held;
  std::vector<char> buf(kMaxPacket);
  epoll_event events[16];
  for (;;) {
    const Clock::time_point now = Clock::now();
    while (!held.empty() && held.front().due <= now) {
      const Held& h = held.front();
      // A TUN write hands the packet to the namespace's stack; it fails only for a malformed
      // packet or a device going away, and then the packet is lost, as on a wire.
      if (write(h.fd, h.bytes.data(), h.bytes.size()) < 0) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
      } else {
        relayed_.fetch_add(1, std::memory_order_relaxed);
      }
      held.pop_front();
    }
    itimerspec when{};  // zero: disarmed (timerfd timers are exact: no timer slack)
    if (!held.empty()) {
      const auto ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(held.front().due.time_since_epoch())
              .count();
      when.it_value.tv_sec = ns / 1000000000;
      when.it_value.tv_nsec = ns % 1000000000;
    }
    timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &when, nullptr);
    const int n = epoll_wait(epoll_fd_, events, 16, -1);
    if (n < 0 && errno != EINTR) return;  // cannot wait any more: the links go dead
    for (int k = 0; k < n; ++k) {
      const uint64_t tag = events[k].data.u64;
      if (tag == kStop) return;
      if (tag == kTimer) {
        uint64_t expirations;
        (void)!read(timer_fd_, &expirations, sizeof(expirations));
        continue;
      }
      // At most a few packets per port and wake-up, so that due packets go out on time while a
      // port streams.
      for (int i = 0; i < kReadsPerWake; ++i) {
        const ssize_t r = read(fds_[tag], buf.data(), buf.size());
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) break;
        if (r <= 0) {  // the device is gone (or broken): stop watching it, or it fires forever
          epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fds_[tag], nullptr);
          break;
        }
        const int to = PortOf(buf.data(), static_cast<size_t>(r));
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

int DelayLine::PortOf(const char* packet, size_t n) const {
  const auto* b = reinterpret_cast<const unsigned char*>(packet);
  if (n < 20 || (b[0] >> 4) != 4) return -1;  // IPv4 only
  uint32_t dst;
  std::memcpy(&dst, b + 16, sizeof(dst));
  for (size_t i = 0; i < addrs_.size(); ++i) {
    if (addrs_[i] == dst) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace hvd::clustertest
