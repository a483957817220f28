#include "agent/master_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/logging.h"

namespace hvd::agent {
namespace {

constexpr int kLowest = 20000;   // below: well-known services (8080, 8888, 9090...) crowd
constexpr int kMinRange = 1000;  // fewer ports than this: let the kernel pick
constexpr int kTries = 64;       // random draws before giving up
constexpr auto kRemember = std::chrono::minutes(10);
constexpr size_t kMaxRemembered = 4096;

// Binds one socket of `family` to the wildcard address at `port` and closes it. *bound: the port
// the kernel gave (port 0). True when the family is missing here (no IPv6): nothing to conflict.
bool BindOnce(int family, int port, int* bound) {
  const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno == EAFNOSUPPORT;
  const int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_storage ss = {};
  socklen_t len;
  if (family == AF_INET6) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // IPv4 too, as torch's store
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_any;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    a->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof *a;
  }
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0;
  if (ok && bound != nullptr) {
    sockaddr_storage got = {};
    socklen_t got_len = sizeof got;
    ok = getsockname(fd, reinterpret_cast<sockaddr*>(&got), &got_len) == 0;
    *bound = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&got)->sin6_port
                                      : reinterpret_cast<sockaddr_in*>(&got)->sin_port);
  }
  close(fd);
  return ok;
}

}  // namespace

Status ParsePortRange(const std::string& text, PortRange* out) {
  std::istringstream in(text);
  PortRange r;
  if (!(in >> r.lo >> r.hi) || r.lo < 1 || r.hi > 65535 || r.lo > r.hi) {
    return InvalidArgument("not a port range: '" + text + "' (expected 'LOW HIGH')");
  }
  *out = r;
  return Status::OK();
}

PortRange MasterPortRange(const PortRange& ephemeral) {
  PortRange below{kLowest, ephemeral.lo - 1};
  if (below.size() >= kMinRange) return below;
  PortRange above{std::max(kLowest, ephemeral.hi + 1), 65535};
  if (above.size() >= kMinRange) return above;
  return PortRange{1, 0};
}

bool PortBindable(int port, int* bound) {
  int got = port;
  // IPv6 first when port is 0, so the kernel's pick is then checked on IPv4 too.
  if (!BindOnce(AF_INET6, port, &got)) return false;
  if (got == 0 && port == 0) {
    // No IPv6 here: the IPv4 bind picks.
    if (!BindOnce(AF_INET, 0, &got)) return false;
  } else if (!BindOnce(AF_INET, got, nullptr)) {
    return false;
  }
  if (bound != nullptr) *bound = got;
  return got > 0;
}

MasterPortPicker::MasterPortPicker(Bindable bindable, std::string range_file)
    : bindable_(std::move(bindable)),
      range_file_(std::move(range_file)),
      rng_(static_cast<unsigned>(getpid()) ^
           static_cast<unsigned>(Clock::now().time_since_epoch().count())) {}

bool MasterPortPicker::RecentLocked(int port, Clock::time_point now) {
  while (!recent_.empty() &&
         (now - recent_.front().second > kRemember || recent_.size() > kMaxRemembered)) {
    recent_.pop_front();
  }
  for (const auto& [p, when] : recent_) {
    if (p == port) return true;
  }
  return false;
}

Status MasterPortPicker::Pick(int* port) {
  PortRange ephemeral{32768, 60999};  // Linux's default, when the file cannot be read
  {
    std::ifstream in(range_file_);
    std::stringstream text;
    text << in.rdbuf();
    if (in && !ParsePortRange(text.str(), &ephemeral).ok()) ephemeral = {32768, 60999};
  }
  const PortRange range = MasterPortRange(ephemeral);
  base::MutexLock lock(&mu_);
  const auto now = Clock::now();
  int busy = 0;
  for (int i = 0; i < kTries; ++i) {
    int candidate = 0;  // 0: the kernel picks (no room outside the ephemeral range)
    if (range.size() > 0) {
      candidate = range.lo + static_cast<int>(rng_() % static_cast<unsigned>(range.size()));
      if (RecentLocked(candidate, now)) continue;
    }
    int bound = 0;
    if (bindable_(candidate, &bound) && bound > 0 && !RecentLocked(bound, now)) {
      recent_.emplace_back(bound, now);
      *port = bound;
      return Status::OK();
    }
    ++busy;
  }
  return Unavailable("no free TCP port for MASTER_PORT after " + std::to_string(kTries) +
                     " tries (" + std::to_string(busy) + " in use) in " +
                     (range.size() > 0 ? std::to_string(range.lo) + "-" + std::to_string(range.hi)
                                       : std::string("the ephemeral range")) +
                     "; free some ports, or pass -x MASTER_PORT=N");
}

hvd::v1::AgentMessage MasterPortPicker::Answer(const hvd::v1::MasterPortRequest& request) {
  hvd::v1::AgentMessage m;
  hvd::v1::MasterPortReport* r = m.mutable_master_port();
  r->set_request_id(request.request_id());
  int port = 0;
  Status s = Pick(&port);
  if (s.ok()) {
    r->set_port(port);
    HVD_LOG(INFO) << "job " << request.job_id() << ": MASTER_PORT " << port;
  } else {
    r->set_error(s.message());
    HVD_LOG(WARNING) << "job " << request.job_id() << ": " << s.message();
  }
  return m;
}

}  // namespace hvd::agent
