#include "tests/cluster/netns.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

namespace hvd::clustertest {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kToolTimeout = std::chrono::seconds(20);  // any one ip/tc command
constexpr const char* kNetnsDir = "/var/run/netns";
constexpr const char* kStalePrefix = "hvdt-";

std::string Join(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

pid_t NetnsCluster::Spawn(const std::vector<std::string>& argv, int out_fd, int err_fd) {
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (out_fd >= 0) dup2(out_fd, 1);
    if (err_fd >= 0) dup2(err_fd, 2);
    execvp(cargv[0], cargv.data());
    _exit(127);
  }
  return pid;
}

Status NetnsCluster::Run(const std::vector<std::string>& argv, std::string* out) {
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return Internal(std::string("pipe: ") + strerror(errno));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Internal(std::string("pipe: ") + strerror(errno));
  }
  const pid_t pid = Spawn(argv, out_pipe[1], err_pipe[1]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return Internal("fork for `" + Join(argv) + "`: " + strerror(errno));
  }
  std::string text[2];
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  const auto deadline = Clock::now() + kToolTimeout;
  bool timed_out = false;
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    if (poll(fds, 2, static_cast<int>(left)) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        text[i].append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
      }
    }
  }
  for (pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (out != nullptr) *out = text[0];
  if (timed_out) return DeadlineExceeded("`" + Join(argv) + "` did not finish in 20 s");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::OK();
  const std::string how = WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                            : "signal " + std::to_string(WTERMSIG(status));
  return Unavailable("`" + Join(argv) + "` failed (" + how + "): " + Trim(text[1]));
}

std::vector<std::string> NetnsCluster::In(const std::string& ns,
                                          const std::vector<std::string>& argv) {
  std::vector<std::string> v = {"/usr/sbin/ip", "netns", "exec", ns};
  v.insert(v.end(), argv.begin(), argv.end());
  return v;
}

Status NetnsCluster::InNamespace(const std::string& ns, const std::function<Status()>& fn) {
  // setns moves only the calling thread, so a short-lived thread enters the namespace, runs `fn`
  // there and ends; this thread's namespace never changes.
  Status result;
  std::thread t([&] {
    const std::string path = std::string(kNetnsDir) + "/" + ns;
    const int nsfd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (nsfd < 0) {
      result = Unavailable("open " + path + ": " + strerror(errno));
      return;
    }
    const int r = setns(nsfd, CLONE_NEWNET);
    const int err = errno;
    close(nsfd);
    if (r != 0) {
      result = Unavailable("setns " + path + ": " + strerror(err));
      return;
    }
    result = fn();
  });
  t.join();
  return result;
}

Status NetnsCluster::SocketIn(const std::string& ns, int* fd) {
  return InNamespace(ns, [&]() -> Status {
    *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*fd < 0) return Unavailable("socket in " + ns + ": " + strerror(errno));
    return Status::OK();
  });
}

Status NetnsCluster::DeviceBytes(const std::string& ns, const std::string& dev, int64_t* tx,
                                 int64_t* rx) {
  std::string out;
  HVD_RETURN_IF_ERROR(Run({"ip", "-n", ns, "-s", "-j", "link", "show", "dev", dev}, &out));
  const nlohmann::json j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array() || j.empty() || !j[0].contains("stats64")) {
    return Internal("unexpected `ip -s -j link show` output for " + dev + " in " + ns + ": " + out);
  }
  *tx = j[0]["stats64"]["tx"]["bytes"].get<int64_t>();
  *rx = j[0]["stats64"]["rx"]["bytes"].get<int64_t>();
  return Status::OK();
}

Status NetnsCluster::ParseRate(const std::string& rate, double* bits_per_second) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(rate, &used);
  } catch (...) {
    used = 0;
  }
  const std::string unit = rate.substr(used);
  const double scale = unit == "bit"    ? 1
                       : unit == "kbit" ? 1e3
                       : unit == "mbit" ? 1e6
                       : unit == "gbit" ? 1e9
                                        : 0;
  if (used == 0 || scale == 0 || !(v > 0) || !std::isfinite(v)) {
    return InvalidArgument("rate '" + rate +
                           "' is not a tc rate; use a number with bit, kbit, mbit or gbit "
                           "(e.g. 1gbit)");
  }
  *bits_per_second = v * scale;
  return Status::OK();
}

Status NetnsCluster::ParseDelay(const std::string& delay, std::chrono::microseconds* out) {
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(delay, &used);
  } catch (...) {
    used = 0;
  }
  const std::string unit = delay.substr(used);
  const double us = unit == "us" || unit == "usec"   ? 1
                    : unit == "ms" || unit == "msec" ? 1e3
                    : unit == "s" || unit == "sec"   ? 1e6
                                                     : 0;
  if (used == 0 || us == 0 || !(v >= 0) || !std::isfinite(v) || v * us > 60e6) {
    return InvalidArgument("delay '" + delay +
                           "' is not a tc time; use a number with us, ms or s, at most 60 s "
                           "(e.g. 100us)");
  }
  *out = std::chrono::microseconds(static_cast<int64_t>(std::llround(v * us)));
  return Status::OK();
}

NetnsCluster::NetnsCluster(NetnsOptions options) : options_(std::move(options)) {
  static std::atomic<int> counter{0};
  if (options_.prefix.empty()) {
    options_.prefix = kStalePrefix + std::to_string(getpid()) + "-" + std::to_string(counter++);
  }
  switch_ns_ = options_.prefix + "-sw";
  launcher_ns_ = options_.prefix + "-l";
}

NetnsCluster::~NetnsCluster() {
  (void)Destroy();
}

std::string NetnsCluster::host_ns(int i) const {
  return options_.prefix + "-h" + std::to_string(i);
}
std::string NetnsCluster::host_name(int i) const {
  return std::string("host-") + static_cast<char>('a' + i);
}
std::string NetnsCluster::host_addr(int i) const {
  return "10.77.0." + std::to_string(11 + i);
}
std::string NetnsCluster::decoy_addr(int i) const {
  return "172.31.0." + std::to_string(11 + i);
}

std::vector<std::string> NetnsCluster::namespaces() const {
  std::vector<std::string> v = {launcher_ns_};
  for (int i = 0; i < options_.hosts; ++i) v.push_back(host_ns(i));
  v.push_back(switch_ns_);
  return v;
}

Status NetnsCluster::Create(const NetnsOptions& options, std::unique_ptr<NetnsCluster>* out) {
  if (options.hosts < 1 || options.hosts > 26) {
    return InvalidArgument("a netns cluster has 1 to 26 hosts, not " +
                           std::to_string(options.hosts));
  }
  double bits = 0;
  if (!options.rate.empty()) HVD_RETURN_IF_ERROR(ParseRate(options.rate, &bits));
  std::chrono::microseconds delay{0};
  if (!options.delay.empty()) HVD_RETURN_IF_ERROR(ParseDelay(options.delay, &delay));
  if (options.delay_by != "" && options.delay_by != "netem" && options.delay_by != "relay") {
    return InvalidArgument("delay_by '" + options.delay_by +
                           "': use netem or relay (or leave it empty: netem where the kernel has "
                           "it)");
  }
  if (!options.delay_by.empty() && options.delay.empty()) {
    return InvalidArgument("delay_by '" + options.delay_by + "' without a delay: give one too");
  }
  if (geteuid() != 0) {
    return FailedPrecondition("network namespaces need root (this process runs as uid " +
                              std::to_string(geteuid()) + ")");
  }
  DeleteStaleNamespaces();
  std::unique_ptr<NetnsCluster> c(new NetnsCluster(options));
  Status s = c->Build();
  if (!s.ok()) {
    (void)c->Destroy();
    return s;
  }
  *out = std::move(c);
  return Status::OK();
}

Status NetnsCluster::Build() {
  for (const std::string& ns : namespaces()) {
    Status s = Run({"ip", "netns", "add", ns});
    if (!s.ok()) {
      return FailedPrecondition("cannot create network namespaces here: " + s.message());
    }
    created_.push_back(ns);
    HVD_RETURN_IF_ERROR(Run({"ip", "-n", ns, "link", "set", "lo", "up"}));
  }
  if (!options_.delay.empty()) {
    delay_by_ = !options_.delay_by.empty() ? options_.delay_by : NetemWorks() ? "netem" : "relay";
  }
  const bool relay = delay_by_ == "relay";
  if (relay) {
    std::chrono::microseconds delay{0};
    HVD_RETURN_IF_ERROR(ParseDelay(options_.delay, &delay));
    std::vector<DelayPort> ports = {{launcher_ns_, launcher_addr()}};
    for (int i = 0; i < options_.hosts; ++i) ports.push_back({host_ns(i), host_addr(i)});
    HVD_RETURN_IF_ERROR(DelayLine::Start(ports, delay, &relay_));
  } else {
    HVD_RETURN_IF_ERROR(Run({"ip", "-n", switch_ns_, "link", "add", "br0", "type", "bridge"}));
    HVD_RETURN_IF_ERROR(Run({"ip", "-n", switch_ns_, "link", "set", "br0", "up"}));
    HVD_RETURN_IF_ERROR(AddPort(launcher_ns_, "pl", launcher_addr()));
    HVD_RETURN_IF_ERROR(Shape(launcher_ns_, "eth0", false, delay_by_ == "netem"));
  }
  for (int i = 0; i < options_.hosts; ++i) {
    const std::string ns = host_ns(i), port = std::string("p").append(std::to_string(i));
    if (!relay) HVD_RETURN_IF_ERROR(AddPort(ns, port, host_addr(i)));
    if (options_.decoy) {
      HVD_RETURN_IF_ERROR(Run({"ip", "-n", ns, "link", "add", "decoy0", "type", "bridge"}));
      HVD_RETURN_IF_ERROR(
          Run({"ip", "-n", ns, "addr", "add", decoy_addr(i) + "/24", "dev", "decoy0"}));
      HVD_RETURN_IF_ERROR(Run({"ip", "-n", ns, "link", "set", "decoy0", "up"}));
    }
    // The rate both ways; netem's delay once per packet, on its way out of a namespace (as the
    // relay holds each packet once).
    const bool rate = !options_.rate.empty();
    HVD_RETURN_IF_ERROR(Shape(ns, "eth0", rate, delay_by_ == "netem"));     // host -> switch
    if (!relay) HVD_RETURN_IF_ERROR(Shape(switch_ns_, port, rate, false));  // switch -> host
  }
  return Status::OK();
}

Status NetnsCluster::AddPort(const std::string& ns, const std::string& port,
                             const std::string& addr) {
  // Created inside the switch namespace with its peer moved straight into `ns`: the machine's own
  // namespace never sees either end, so names cannot clash with another cluster's.
  HVD_RETURN_IF_ERROR(Run({"ip", "-n", switch_ns_, "link", "add", port, "type", "veth", "peer",
                           "name", "eth0", "netns", ns}));
  HVD_RETURN_IF_ERROR(Run({"ip", "-n", switch_ns_, "link", "set", port, "master", "br0", "up"}));
  HVD_RETURN_IF_ERROR(Run({"ip", "-n", ns, "addr", "add", addr + "/24", "dev", "eth0"}));
  return Run({"ip", "-n", ns, "link", "set", "eth0", "up"});
}

bool NetnsCluster::NetemWorks() {
  // Tried on the switch's loopback, which carries nothing of the cluster's.
  if (!Run({"tc", "-n", switch_ns_, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"})
           .ok()) {
    return false;
  }
  (void)Run({"tc", "-n", switch_ns_, "qdisc", "del", "dev", "lo", "root"});
  return true;
}

Status NetnsCluster::Shape(const std::string& ns, const std::string& dev, bool rate, bool delay) {
  if (!rate && !delay) return Status::OK();
  std::vector<std::string> tbf;
  if (rate) {
    double bits = 0;
    HVD_RETURN_IF_ERROR(ParseRate(options_.rate, &bits));
    // 10 ms worth of bytes, at least 64 KiB: veth hands tbf whole 64 KiB GSO packets, and a
    // bucket smaller than one of them would stall the link.
    const int64_t burst = std::max<int64_t>(64 << 10, static_cast<int64_t>(bits / 8 / 100));
    tbf = {"tbf", "rate", options_.rate, "burst", std::to_string(burst), "latency", "100ms"};
  }
  std::vector<std::string> base = {"tc", "-n", ns, "qdisc", "add", "dev", dev};
  if (!delay) {
    std::vector<std::string> cmd = base;
    cmd.push_back("root");
    cmd.insert(cmd.end(), tbf.begin(), tbf.end());
    return Run(cmd);
  }
  std::vector<std::string> netem = base;
  for (const char* a : {"root", "handle", "1:", "netem", "delay"}) netem.push_back(a);
  netem.push_back(options_.delay);
  Status s = Run(netem);
  if (!s.ok()) {
    return Unavailable("cannot add a delay (tc netem) on " + dev + " in " + ns +
                       "; this kernel may lack sch_netem: " + s.message());
  }
  if (tbf.empty()) return Status::OK();
  std::vector<std::string> cmd = base;
  for (const char* a : {"parent", "1:", "handle", "2:"}) cmd.push_back(a);
  cmd.insert(cmd.end(), tbf.begin(), tbf.end());
  return Run(cmd);
}

Status NetnsCluster::BreakRoute(int from, int to) {
  if (from < 0 || to < 0 || from >= options_.hosts || to >= options_.hosts) {
    return InvalidArgument("BreakRoute: no such host");
  }
  // Into a bridge with no ports: the packets vanish without an error, as behind a firewall that
  // drops them (a blackhole route would fail the dial at once with EINVAL instead).
  const std::string ns = host_ns(from);
  std::string links;
  HVD_RETURN_IF_ERROR(Run({"ip", "-n", ns, "-o", "link", "show"}, &links));
  if (links.find(" dead0:") == std::string::npos) {
    HVD_RETURN_IF_ERROR(Run({"ip", "-n", ns, "link", "add", "dead0", "type", "bridge"}));
    HVD_RETURN_IF_ERROR(Run({"ip", "-n", ns, "link", "set", "dead0", "up"}));
  }
  return Run({"ip", "-n", ns, "route", "add", host_addr(to) + "/32", "dev", "dead0"});
}

Status NetnsCluster::Destroy() {
  relay_.reset();  // closing the TUN fds deletes the devices
  Status first;
  // The launcher and the hosts first, the switch last; deleting a namespace deletes its devices.
  for (const std::string& ns : created_) {
    Status s = Run({"ip", "netns", "del", ns});
    if (!s.ok() && first.ok()) first = s;
  }
  created_.clear();
  return first;
}

void DeleteStaleNamespaces() {
  DIR* d = opendir(kNetnsDir);
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(kStalePrefix, 0) != 0) continue;
    const pid_t pid = std::atoi(name.c_str() + std::strlen(kStalePrefix));
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(name);
  }
  closedir(d);
  for (const std::string& ns : stale) (void)NetnsCluster::Run({"ip", "netns", "del", ns});
}

}  // namespace hvd::clustertest
