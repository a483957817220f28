// The agent's answer to hvd.v1.MasterPortRequest: a port on this host for torch.distributed's
// store (MASTER_PORT), chosen before the job's ranks start so that every rank can be told it
// (torchrun's contract, control/worker_env.h). Rank 0's init_process_group binds it a moment later.
//
// Why the gap between this check and that bind is safe enough: the port is drawn at random from
// below the kernel's ephemeral range (net.ipv4.ip_local_port_range), which the kernel never hands
// out by itself, neither to bind(port 0) nor to the local end of a connect(). Only a program that
// names that very port could take it in the second or two before rank 0 binds it. Ports this
// agent gave out in the last 10 minutes are not given again, so two jobs starting together on one
// host never share one. (torchrun's own choice binds port 0 and closes it, from the ephemeral
// range, where any outgoing connection on the host may take it first.) When the ephemeral range
// leaves fewer than 1000 ports below or above it, the kernel's bind(0) picks instead.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <random>
#include <string>

#include "base/mutex.h"
#include "hvd/status.h"
#include "hvd/v1/agent.pb.h"

namespace hvd::agent {

struct PortRange {
  int lo = 0, hi = 0;  // inclusive; empty when lo > hi
  int size() const { return hi >= lo ? hi - lo + 1 : 0; }
};

// "32768\t60999\n" (the file's form) to a range.
Status ParsePortRange(const std::string& text, PortRange* out);

// Where MASTER_PORT is drawn from, given the ephemeral range: [20000, lo) or, when the ephemeral
// range starts lower, above it up to 65535; an empty range when neither has 1000 ports.
PortRange MasterPortRange(const PortRange& ephemeral);

// Whether a TCP listener could bind `port` on every address right now, as torch's store does
// (SO_REUSEADDR; IPv6 dual stack where the host has IPv6, and IPv4). port 0: the kernel picks,
// *bound gets it.
bool PortBindable(int port, int* bound = nullptr);

class MasterPortPicker {
 public:
  using Clock = std::chrono::steady_clock;
  using Bindable = std::function<bool(int port, int* bound)>;

  // Tests inject `bindable` and the range file.
  explicit MasterPortPicker(Bindable bindable = PortBindable,
                            std::string range_file = "/proc/sys/net/ipv4/ip_local_port_range");

  // A port for MASTER_PORT (see the file comment); an error naming what was tried when none is
  // free.
  Status Pick(int* port);

  // The report answering `request`.
  hvd::v1::AgentMessage Answer(const hvd::v1::MasterPortRequest& request);

 private:
  bool RecentLocked(int port, Clock::time_point now) HVD_REQUIRES(mu_);

  const Bindable bindable_;
  const std::string range_file_;
  base::Mutex mu_;
  std::minstd_rand rng_ HVD_GUARDED_BY(mu_);
  // Ports given out, oldest first.
  std::deque<std::pair<int, Clock::time_point>> recent_ HVD_GUARDED_BY(mu_);
};

}  // namespace hvd::agent
