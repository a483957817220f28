// The network probe's messages as the launcher's logic sees them (hvd.v1.NetworkProbe and
// NetworkProbeReport; network_convert.h translates).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hvd::launcherd {

enum class ProbeStep { kUnspecified = 0, kListen = 1, kDial = 2, kDone = 3 };

struct ProbeCommand {
  std::string probe_id;
  ProbeStep step = ProbeStep::kUnspecified;
  int64_t timeout_ms = 0;
  struct Target {
    int candidate = 0;
    std::string address;
    int port = 0;
    std::string expect_agent;
  };
  std::vector<Target> targets;  // kDial
};

struct ProbeReport {
  std::string probe_id;
  ProbeStep step = ProbeStep::kUnspecified;
  int port = 0;       // kListen
  std::string error;  // kListen failed
  struct Dial {
    int candidate = 0;
    bool ok = false;
    std::string error;
    int64_t micros = 0;
  };
  std::vector<Dial> dials;  // kDial, in the order of the command's targets
};

}  // namespace hvd::launcherd
