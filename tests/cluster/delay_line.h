// DelayLine: namespaces linked through a userspace relay that holds every packet for a fixed
// one-way delay, what `tc netem delay` does, for kernels built without sch_netem (this project's
// CI and development VMs: `CONFIG_NET_SCH_NETEM is not set`). NetnsCluster uses it for `delay`
// where netem is missing (tests/cluster/netns.h).
//
// Vocabulary:
//   port  - one namespace's link: a TUN device named eth0 made inside that namespace (IPv4, no
//           link layer, MTU 65000) with the port's address/24, and its fd, held by the relay.
//   relay - one thread: it reads each packet a port's namespace sends, finds the port that owns
//           the destination address, and writes the packet there `delay` after it was read. One
//           queue in arrival order: every packet waits the same time, so none overtakes another.
//           A packet for an address no port owns is dropped (a switch with no such host), as is
//           anything but IPv4.
// The relay's own cost adds to the delay (a read, a copy and a write per packet, tens of
// microseconds on a busy 2-vCPU VM) and caps the links' throughput (0.8-1.2 GB/s there); shape
// the rate below that, or measure against a relay with delay 0, where it matters: packets
// waiting in front of a saturated relay wait longer than the delay.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "hvd/status.h"

namespace hvd::clustertest {

struct DelayPort {
  std::string ns;    // an existing network namespace (/var/run/netns/<ns>)
  std::string addr;  // dotted IPv4 address for its eth0, /24
};

class DelayLine {
 public:
  // Makes every port's device and starts the relay. Needs CAP_NET_ADMIN and /dev/net/tun.
  static Status Start(const std::vector<DelayPort>& ports, std::chrono::microseconds delay,
                      std::unique_ptr<DelayLine>* out);
  // Stops the relay and closes the devices' fds, which deletes the devices.
  ~DelayLine();
  DelayLine(const DelayLine&) = delete;
  DelayLine& operator=(const DelayLine&) = delete;

  int64_t relayed() const { return relayed_.load(std::memory_order_relaxed); }
  int64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  DelayLine(std::chrono::microseconds delay) : delay_(delay) {}
  void Relay();
  // The port owning an IPv4 packet's destination address; -1 for none (or not IPv4).
  int PortOf(const char* packet, size_t n) const;

  const std::chrono::microseconds delay_;
  std::vector<int> fds_;         // one TUN fd per port
  std::vector<uint32_t> addrs_;  // each port's address, network byte order
  int epoll_fd_ = -1;            // the ports, the stop eventfd and the timer
  int stop_fd_ = -1;             // eventfd: the destructor's signal
  int timer_fd_ = -1;            // timerfd: when the oldest held packet is due
  std::atomic<int64_t> relayed_{0}, dropped_{0};
  std::thread thread_;
};

}  // namespace hvd::clustertest
