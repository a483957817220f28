// The socket work of the network probe (agent/probe.h): a listener that greets every caller with
// the probe's id and this agent's id, and a dialer that tries many targets at once and checks
// that the right agent answered. The greeting is one line: "HVDPROBE1 <probe id> <agent id>\n".
// Checking it catches an address that reaches the wrong host, such as a per-host bridge address
// (docker0's 172.17.0.1) that every host has: dialing it reaches the dialer itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "hvd/status.h"

namespace hvd::agent {

std::string ProbeGreeting(const std::string& probe_id, const std::string& agent_id);

struct ProbeDialTarget {
  std::string address;  // IPv4, or a name (resolved here)
  int port = 0;
  std::string expect_agent;
};

struct ProbeDialResult {
  bool ok = false;
  std::string error;
  int64_t micros = 0;  // from the dial to the greeting
};

// Dials every target at once (non-blocking sockets, one poll loop) and reads its greeting; each
// target gets at most `timeout`. Never blocks longer than that (plus name resolution of targets
// that are not IPv4 literals).
std::vector<ProbeDialResult> DialAll(const std::vector<ProbeDialTarget>& targets,
                                     const std::string& probe_id,
                                     std::chrono::milliseconds timeout);

// A TCP listener on 0.0.0.0 (every interface) with an ephemeral port.
Status OpenProbeListener(int* fd, int* port);

// Accepts on `listen_fd` and greets each caller until `deadline` or until `stop_fd` (an eventfd)
// is readable. Closes neither fd.
void ServeProbe(int listen_fd, int stop_fd, const std::string& greeting,
                std::chrono::steady_clock::time_point deadline);

}  // namespace hvd::agent
