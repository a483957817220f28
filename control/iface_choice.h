// Which network a job's ranks talk over, decided from what its hosts' agents report and from a
// probe between them. Pure: the launcher (launcherd/network_check.h) gathers the inputs and runs
// the probe; the rules are here and tested directly (tests/control/iface_choice_test.cc).
//
// Rules:
//  - A candidate network gives every host of the job one address (and the interface holding it).
//  - With --network-interface, each selector in the user's order is a candidate: a name picks
//    each host's first up address on that interface, a subnet each host's first up address in
//    it. A selector some host cannot satisfy is skipped with that reason.
//  - Without: first the addresses the agents advertise (each host's route towards the launcher),
//    then every other interface name that is up on all the hosts, by name. When every advertised
//    address is a loopback address the hosts are one machine: that candidate alone, no probe.
//  - The probe: each host dials its ring successor (hosts in the order of their first rank) on
//    every candidate at once, with a short deadline. The first candidate in order on which every
//    pair connected is chosen; the others are reported as skipped with their first failing pair.
//    None works: the job fails with, per candidate, which host could not reach which host at
//    which address, and why.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "control/netif.h"
#include "hvd/status.h"

namespace hvd::control {

// One host of the job as the choice sees it (one agent: two agents sharing a host name are two
// hosts here).
struct ProbeHost {
  std::string agent_id;
  std::string host;  // the name messages use
  std::string advertise_addr;
  std::vector<NetInterface> interfaces;
};

struct Candidate {
  std::string label;                // "eth0", "10.0.0.0/8", "the advertised addresses"
  std::vector<std::string> ifaces;  // per host ("" when the address is on no known interface)
  std::vector<std::string> addrs;   // per host
  std::vector<int> prefix_lens;     // per host (0 when unknown)
};

struct Candidates {
  std::vector<Candidate> list;          // in order of preference
  std::vector<std::string> impossible;  // "eth1: host-b has no up interface eth1"
  bool probe = true;                    // false: one host, or all on loopback (one machine)
};

// REQUIRES: hosts non-empty. InvalidArgument when there is no candidate at all (the message lists
// why each selector was impossible and what the hosts have).
Status BuildCandidates(const std::vector<ProbeHost>& hosts,
                       const std::vector<InterfaceSelector>& selectors, Candidates* out);

// The dials of the probe: host i dials host (i+1) % n; both directions for two hosts; none for
// one.
std::vector<std::pair<int, int>> RingPairs(int n);

// What one dial found.
struct DialOutcome {
  bool ok = false;
  std::string error;  // "connect: Connection refused", "no answer within 500 ms", ...
  int64_t micros = 0;
};

// Outcomes[c][p]: candidate c, pair p of RingPairs(hosts.size()).
using ProbeOutcomes = std::vector<std::vector<DialOutcome>>;

// The record of the decision, kept in the job's status (REST, hvdrun status and --verbose).
struct NetworkReport {
  bool decided = false;  // false: nothing was decided (one host, no selectors): today's defaults
  bool ok = false;
  std::string summary;  // one line: "using eth0 (10.77.0.0/24) on all 3 hosts; skipped ..."
  std::string chosen;   // the chosen candidate's label
  struct HostChoice {
    std::string host, agent_id, iface, address;
  };
  std::vector<HostChoice> hosts;  // when ok: per host, in ring order
  struct Dial {
    std::string candidate, from, to, address;
    bool ok = false;
    std::string error;
    int64_t micros = 0;
  };
  std::vector<Dial> dials;  // every dial of the probe
  int64_t probe_ms = 0;
};

// Decides from the probe's outcomes (empty and unused when !candidates.probe).
NetworkReport Choose(const std::vector<ProbeHost>& hosts, const Candidates& candidates,
                     const ProbeOutcomes& outcomes);

// The chosen address and interface for `agent_id`, when the report chose one for it.
bool ChoiceFor(const NetworkReport& report, const std::string& agent_id, std::string* address,
               std::string* iface);

}  // namespace hvd::control
