// Placement: which agent slot runs each rank of a job, and the rank numbers Horovod would give it.
// Pure (no I/O, no clock) so every rule is tested directly (tests/control/placement_test.cc).
//
// Rules:
//  - With hosts (`-H a:2,b:2`): host-major packing. Ranks fill the named hosts in order, each up to
//    its count, until np ranks are placed (np=3 -> ranks 0,1 on a, 2 on b). A host is served by the
//    agents whose host name or advertise address equals it, in registration order.
//  - Without hosts: ranks fill agents with free slots in registration order.
//  - Within an agent, ranks take its lowest free slot indices (the slot picks the GPU).
//  - Local/cross ranks follow Horovod: local_rank is the rank's position among the ranks on its
//    host, local_size their number; cross_rank is the index of its host among the hosts having a
//    rank with that local_rank (in order of first rank), cross_size the number of such hosts.
//
// Outcomes: kPlaced; kWait when it could fit once slots free up or agents register (an unknown
// host waits too: its agent may not have connected yet); kNeverFits when the request itself
// cannot be met (np above the named hosts' total, or a host whose registered agents have fewer
// slots in total than the ranks it must take).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace hvd::control {

struct AgentSlots {
  std::string id;
  std::string host;            // the agent's host name
  std::string advertise_addr;  // also matches a -H entry
  int slots = 0;
  std::set<int> busy;  // slot indices in use by live ranks
  int64_t order = 0;   // registration order: lower first
};

struct HostRequest {
  std::string host;
  int slots = 0;
};

struct PlacementRequest {
  int np = 0;
  std::vector<HostRequest> hosts;  // empty: any free slots
};

struct RankSlot {
  int rank = 0;
  int local_rank = 0;
  int local_size = 0;
  int cross_rank = 0;
  int cross_size = 0;
  std::string agent_id;
  std::string host;  // the agent's host name: the identity local ranks are computed from
  int slot = 0;      // index of the slot on its agent
};

enum class PlacementOutcome { kPlaced, kWait, kNeverFits };

struct PlacementResult {
  PlacementOutcome outcome = PlacementOutcome::kWait;
  std::string reason;           // why kWait or kNeverFits, one line
  std::vector<RankSlot> ranks;  // kPlaced: one per rank, in rank order
};

PlacementResult Place(const std::vector<AgentSlots>& agents, const PlacementRequest& request);

// Fills local_rank/local_size/cross_rank/cross_size from each rank's host, as Horovod does.
// `ranks` must be in rank order.
void ComputeLocalAndCrossRanks(std::vector<RankSlot>* ranks);

}  // namespace hvd::control
