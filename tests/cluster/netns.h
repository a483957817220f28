// A cluster of test hosts on one machine: Linux network namespaces joined by a bridge (or, for a
// delay without netem, by a userspace relay; see below).
//
//   <prefix>-sw   the "switch": bridge br0, one veth port per namespace below (empty with the
//   relay) <prefix>-l    the launcher's host, eth0 10.77.0.1/24 <prefix>-h<i> host i ("host-a",
//   "host-b", ...), eth0 10.77.0.(11+i)/24, and with `decoy` a
//                 second interface decoy0 172.31.0.(11+i)/24: a bridge with no ports, present on
//                 every host like docker0 but routing nowhere (packets to another host's decoy
//                 address are dropped silently, so a dial hangs until its deadline)
//
// Nothing is added to the machine's own namespace: the bridge and every veth live in the
// namespaces, so the addresses are private to this cluster and two clusters never collide. With
// `rate`, every host's link is shaped both ways with tc tbf. With `delay`, every packet between
// the namespaces waits that long once: tc netem on every namespace's way out (the launcher's
// included) where the kernel has it, else (or with
// delay_by "relay") the links are TUN devices behind a userspace relay that holds each packet
// (tests/cluster/delay_line.h; no bridge then, and the rate is shaped on each namespace's way
// out only). The destructor deletes every namespace it created, which removes the veths and
// the bridge with them. Namespaces left by a process that died without its destructor (SIGKILL)
// carry that pid in their name and are deleted by the next Create.
//
// Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2. Create returns FailedPrecondition with
// the reason when namespaces cannot be made here at all, so tests can skip with it; any later
// failure is an error.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hvd/status.h"
#include "tests/cluster/delay_line.h"

namespace hvd::clustertest {

struct NetnsOptions {
  int hosts = 3;         // 1..26
  bool decoy = false;    // decoy0 on every host
  std::string rate;      // tc rate per host link, both ways ("1gbit", "500mbit"); "": none
  std::string delay;     // one-way delay per host link ("100us", "1ms"); "": none
  std::string delay_by;  // "netem", "relay" or "": netem where the kernel has it, else relay
  std::string prefix;    // namespace names; "": "hvdt-<pid>-<n>"
};

class NetnsCluster {
 public:
  static Status Create(const NetnsOptions& options, std::unique_ptr<NetnsCluster>* out);
  ~NetnsCluster();
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  int hosts() const { return options_.hosts; }
  // How `delay` is applied: "netem", "relay", or "" without a delay.
  const std::string& delay_by() const { return delay_by_; }
  // The relay, with delay_by() "relay"; else null.
  const DelayLine* relay() const { return relay_.get(); }
  const std::string& launcher_ns() const { return launcher_ns_; }
  std::string launcher_addr() const { return "10.77.0.1"; }
  std::string host_ns(int i) const;
  std::string host_name(int i) const;   // "host-a", "host-b", ...
  std::string host_addr(int i) const;   // 10.77.0.(11+i)
  std::string decoy_addr(int i) const;  // 172.31.0.(11+i)
  // Every namespace this cluster made, the switch last.
  std::vector<std::string> namespaces() const;

  // argv that runs `argv` inside namespace `ns` ("ip netns exec NS ..."): same pid, so a
  // process harness can start, signal and reap it as usual.
  static std::vector<std::string> In(const std::string& ns, const std::vector<std::string>& argv);
  // Starts argv ($PATH searched) with PR_SET_PDEATHSIG(SIGKILL), so it dies with this process;
  // out_fd and err_fd become its stdout and stderr (-1: inherited). The pid, or -1 (errno set).
  static pid_t Spawn(const std::vector<std::string>& argv, int out_fd, int err_fd);
  // Runs a command to completion (bounded); errors name it and carry its stderr.
  static Status Run(const std::vector<std::string>& argv, std::string* out = nullptr);
  // Runs `fn` on a thread of its own inside namespace `ns` (setns) and returns its status; the
  // caller's namespace never changes. What `fn` makes there (sockets, devices) stays there.
  static Status InNamespace(const std::string& ns, const std::function<Status()>& fn);
  // A TCP socket created inside `ns` (a socket stays in the namespace it was made in, so the
  // caller can connect it from any thread).
  static Status SocketIn(const std::string& ns, int* fd);
  // Bytes sent and received so far by `dev` in `ns`.
  static Status DeviceBytes(const std::string& ns, const std::string& dev, int64_t* tx,
                            int64_t* rx);
  // Makes host `from` unable to reach host `to`'s eth0 address (a route on `from` into a dead
  // end: packets vanish silently, as behind a firewall), while both still reach the launcher.
  Status BreakRoute(int from, int to);

  // Deletes every namespace (idempotent); the first error, if any.
  Status Destroy();

  // Parses a tc rate ("1gbit", "250mbit", "800kbit", "1000000bit") into bits per second.
  static Status ParseRate(const std::string& rate, double* bits_per_second);
  // Parses a tc time with its unit ("100us", "1ms", "0.5msec", "1s") into microseconds.
  static Status ParseDelay(const std::string& delay, std::chrono::microseconds* out);

 private:
  explicit NetnsCluster(NetnsOptions options);
  Status Build();
  Status AddPort(const std::string& ns, const std::string& port, const std::string& addr);
  // tc tbf at `rate` and/or netem's delay on `dev`'s way out of `ns` (nothing when neither).
  Status Shape(const std::string& ns, const std::string& dev, bool rate, bool delay);
  bool NetemWorks();

  NetnsOptions options_;
  std::string delay_by_;
  std::unique_ptr<DelayLine> relay_;
  std::string switch_ns_, launcher_ns_;
  std::vector<std::string> created_;  // in creation order
};

// Deletes namespaces named "hvdt-<pid>-..." whose pid is no longer alive.
void DeleteStaleNamespaces();

}  // namespace hvd::clustertest
