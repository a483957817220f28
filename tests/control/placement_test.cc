#include "control/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace hvd::control {
namespace {

AgentSlots Agent(std::string id, std::string host, int slots, int64_t order,
                 std::set<int> busy = {}, std::string addr = "") {
  AgentSlots a;
  a.id = std::move(id);
  a.host = std::move(host);
  a.advertise_addr = std::move(addr);
  a.slots = slots;
  a.busy = std::move(busy);
  a.order = order;
  return a;
}

PlacementRequest Req(int np, std::vector<HostRequest> hosts = {}) {
  PlacementRequest r;
  r.np = np;
  r.hosts = std::move(hosts);
  return r;
}

// "agent:slot" per rank, for compact expectations.
std::vector<std::string> Where(const PlacementResult& r) {
  std::vector<std::string> out;
  for (const RankSlot& s : r.ranks) out.push_back(s.agent_id + ":" + std::to_string(s.slot));
  return out;
}

// The reference: Horovod's definition, computed the slow and obvious way.
struct Expected {
  int local_rank, local_size, cross_rank, cross_size;
};
std::vector<Expected> HorovodRanks(const std::vector<std::string>& host_of_rank) {
  std::vector<std::string> hosts;  // order of first appearance
  for (const std::string& h : host_of_rank) {
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  }
  std::vector<Expected> out;
  for (size_t r = 0; r < host_of_rank.size(); ++r) {
    Expected e{};
    for (size_t q = 0; q < host_of_rank.size(); ++q) {
      if (host_of_rank[q] != host_of_rank[r]) continue;
      if (q < r) ++e.local_rank;
      ++e.local_size;
    }
    // Hosts with a process whose local rank equals ours.
    std::vector<std::string> with_local;
    for (const std::string& h : hosts) {
      int n = 0;
      for (const std::string& x : host_of_rank) n += (x == h);
      if (n > e.local_rank) with_local.push_back(h);
    }
    e.cross_size = static_cast<int>(with_local.size());
    e.cross_rank = static_cast<int>(
        std::find(with_local.begin(), with_local.end(), host_of_rank[r]) - with_local.begin());
    out.push_back(e);
  }
  return out;
}

void ExpectHorovodMath(const PlacementResult& r) {
  std::vector<std::string> hosts;
  for (const RankSlot& s : r.ranks) hosts.push_back(s.host);
  std::vector<Expected> want = HorovodRanks(hosts);
  ASSERT_EQ(want.size(), r.ranks.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("rank " + std::to_string(i));
    EXPECT_EQ(r.ranks[i].rank, static_cast<int>(i));
    EXPECT_EQ(r.ranks[i].local_rank, want[i].local_rank);
    EXPECT_EQ(r.ranks[i].local_size, want[i].local_size);
    EXPECT_EQ(r.ranks[i].cross_rank, want[i].cross_rank);
    EXPECT_EQ(r.ranks[i].cross_size, want[i].cross_size);
  }
}

TEST(PlacementTest, HostMajorPacking) {
  std::vector<AgentSlots> agents = {Agent("B", "b", 2, 1), Agent("A", "a", 2, 2)};
  PlacementResult r = Place(agents, Req(4, {{"a", 2}, {"b", 2}}));
  ASSERT_EQ(r.outcome, PlacementOutcome::kPlaced) << r.reason;
  // The host list's order wins over registration order.
  EXPECT_EQ(Where(r), (std::vector<std::string>{"A:0", "A:1", "B:0", "B:1"}));
  EXPECT_EQ(r.ranks[0].host, "a");
  EXPECT_EQ(r.ranks[2].host, "b");
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r.ranks[i].local_rank, i % 2);
    EXPECT_EQ(r.ranks[i].local_size, 2);
    EXPECT_EQ(r.ranks[i].cross_rank, i / 2);
    EXPECT_EQ(r.ranks[i].cross_size, 2);
  }
}

TEST(PlacementTest, HostMajorStopsAtNp) {
  std::vector<AgentSlots> agents = {Agent("A", "a", 2, 0), Agent("B", "b", 2, 1)};
  PlacementResult r = Place(agents, Req(3, {{"a", 2}, {"b", 2}}));
  ASSERT_EQ(r.outcome, PlacementOutcome::kPlaced) << r.reason;
  EXPECT_EQ(Where(r), (std::vector<std::string>{"A:0", "A:1", "B:0"}));
  ExpectHorovodMath(r);
  EXPECT_EQ(r.ranks[2].cross_rank, 1);
  EXPECT_EQ(r.ranks[2].cross_size, 2);
  EXPECT_EQ(r.ranks[1].cross_size, 1);  // only host a has a local rank 1
}

TEST(PlacementTest, HostMatchedByAdvertiseAddress) {
  std::vector<AgentSlots> agents = {Agent("A", "node-a", 2, 0, {}, "10.0.0.1")};
  PlacementResult r = Place(agents, Req(2, {{"10.0.0.1", 2}}));
  ASSERT_EQ(r.outcome, PlacementOutcome::kPlaced) << r.reason;
  EXPECT_EQ(r.ranks[1].host, "node-a");  // the agent's host name is the rank's host identity
}

TEST(PlacementTest, UnusedHostNeedNotExist) {
  std::vector<AgentSlots> agents = {Agent("A", "a", 2, 0)};
  PlacementResult r = Place(agents, Req(2, {{"a", 2}, {"ghost", 2}}));
  EXPECT_EQ(r.outcome, PlacementOutcome::kPlaced) << r.reason;
}

TEST(PlacementTest, HostsSkipBusySlots) {
  std::vector<AgentSlots> agents = {Agent("A", "a", 4, 0, {0, 2})};
  PlacementResult r = Place(agents, Req(2, {{"a", 2}}));
  ASSERT_EQ(r.outcome, PlacementOutcome::kPlaced) << r.reason;
  EXPECT_EQ(Where(r), (std::vector<std::string>{"A:1", "A:3"}));
}

TEST(PlacementTest, AnySlotsFillsInRegistrationOrder) {
  std::vector<AgentSlots> agents = {Agent("C", "c", 2, 3), Agent("A", "a", 1, 1),
                                    Agent("B", "b", 3, 2, {0})};
  PlacementResult r = Place(agents, Req(4));
  ASSERT_EQ(r.outcome, PlacementOutcome::kPlaced) << r.reason;
  EXPECT_EQ(Where(r), (std::vector<std::string>{"A:0", "B:1", "B:2", "C:0"}));
  ExpectHorovodMath(r);
}

TEST(PlacementTest, AnySlotsSkipsFullAgents) {
  std::vector<AgentSlots> agents = {Agent("A", "a", 2, 0, {0, 1}), Agent("B", "b", 2, 1)};
  PlacementResult r = Place(agents, Req(2));
  ASSERT_EQ(r.outcome, PlacementOutcome::kPlaced) << r.reason;
  EXPECT_EQ(Where(r), (std::vector<std::string>{"B:0", "B:1"}));
  EXPECT_EQ(r.ranks[0].cross_size, 1);
}

TEST(PlacementTest, WaitsWithoutAgents) {
  PlacementResult r = Place({}, Req(2));
  EXPECT_EQ(r.outcome, PlacementOutcome::kWait);
  EXPECT_EQ(r.reason, "needs 2 slots; no agent registered");
}

TEST(PlacementTest, WaitsForFreeSlots) {
  std::vector<AgentSlots> agents = {Agent("A", "a", 4, 0, {0, 1})};
  PlacementResult r = Place(agents, Req(4));
  EXPECT_EQ(r.outcome, PlacementOutcome::kWait);
  EXPECT_EQ(r.reason, "needs 4 slots; 2 free on 1 agent (4 in total)");
  EXPECT_TRUE(r.ranks.empty());
}

TEST(PlacementTest, AnySlotsBeyondCapacityWaitsForMoreAgents) {
  // Agents may still register, so a job larger than today's cluster waits rather than fails.
  std::vector<AgentSlots> agents = {Agent("A", "a", 1, 0), Agent("B", "b", 1, 1)};
  PlacementResult r = Place(agents, Req(3));
  EXPECT_EQ(r.outcome, PlacementOutcome::kWait);
  EXPECT_EQ(r.reason, "needs 3 slots; 2 free on 2 agents (2 in total)");
}

TEST(PlacementTest, UnknownHostWaitsNamingIt) {
  std::vector<AgentSlots> agents = {Agent("A", "a", 2, 0), Agent("B", "b", 2, 1)};
  PlacementResult r = Place(agents, Req(4, {{"a", 2}, {"x", 2}}));
  EXPECT_EQ(r.outcome, PlacementOutcome::kWait);
  EXPECT_EQ(r.reason, "no agent on host x yet (registered: a, b)");
  r = Place({}, Req(1, {{"x", 1}}));
  EXPECT_EQ(r.reason, "no agent on host x yet (no agent registered)");
}

TEST(PlacementTest, BusyHostWaitsNamingIt) {
  std::vector<AgentSlots> agents = {Agent("A", "a", 2, 0, {1}), Agent("B", "b", 2, 1)};
  PlacementResult r = Place(agents, Req(4, {{"a", 2}, {"b", 2}}));
  EXPECT_EQ(r.outcome, PlacementOutcome::kWait);
  EXPECT_EQ(r.reason, "host a needs 2 slots; 1 free on 1 agent");
}

TEST(PlacementTest, SeveralWaitReasonsAreJoined) {
  std::vector<AgentSlots> agents = {Agent("A", "a", 2, 0, {0})};
  PlacementResult r = Place(agents, Req(4, {{"a", 2}, {"c", 2}}));
  EXPECT_EQ(r.outcome, PlacementOutcome::kWait);
  EXPECT_EQ(r.reason,
            "host a needs 2 slots; 1 free on 1 agent; no agent on host c yet (registered: a)");
}

TEST(PlacementTest, NpAboveHostListNeverFits) {
  PlacementResult r = Place({}, Req(6, {{"a", 2}, {"b", 2}}));
  EXPECT_EQ(r.outcome, PlacementOutcome::kNeverFits);
  EXPECT_EQ(r.reason,
            "np=6 but the host list a:2,b:2 gives only 4 slots; raise the hosts' slots or lower "
            "np");
}

TEST(PlacementTest, HostSmallerThanItsShareNeverFits) {
  std::vector<AgentSlots> agents = {Agent("A", "a", 2, 0), Agent("B", "b", 2, 1)};
  PlacementResult r = Place(agents, Req(6, {{"a", 4}, {"b", 2}}));
  EXPECT_EQ(r.outcome, PlacementOutcome::kNeverFits);
  EXPECT_EQ(r.reason,
            "host a must take 4 ranks but its agent has 2 slots; lower its count in the host "
            "list");
}

TEST(PlacementTest, NeverFitsWinsOverWait) {
  // Waiting for host x would be pointless: host a can never take its share.
  std::vector<AgentSlots> agents = {Agent("A", "a", 1, 0)};
  PlacementResult r = Place(agents, Req(4, {{"x", 2}, {"a", 2}}));
  EXPECT_EQ(r.outcome, PlacementOutcome::kNeverFits);
  EXPECT_NE(r.reason.find("host a must take 2 ranks"), std::string::npos) << r.reason;
}

TEST(PlacementTest, BadRequestsNeverFit) {
  EXPECT_EQ(Place({}, Req(0)).outcome, PlacementOutcome::kNeverFits);
  EXPECT_EQ(Place({}, Req(-1)).reason, "np=-1: a job needs at least 1 rank");
  PlacementResult r = Place({}, Req(2, {{"a", 0}}));
  EXPECT_EQ(r.outcome, PlacementOutcome::kNeverFits);
  EXPECT_NE(r.reason.find("host a is given 0 slots"), std::string::npos) << r.reason;
  r = Place({}, Req(2, {{"a", 1}, {"a", 1}}));
  EXPECT_EQ(r.outcome, PlacementOutcome::kNeverFits);
  EXPECT_NE(r.reason.find("appears twice"), std::string::npos) << r.reason;
}

TEST(PlacementTest, SeveralAgentsServeOneHost) {
  std::vector<AgentSlots> agents = {Agent("A2", "a", 1, 5), Agent("A1", "a", 1, 2)};
  PlacementResult r = Place(agents, Req(2, {{"a", 2}}));
  ASSERT_EQ(r.outcome, PlacementOutcome::kPlaced) << r.reason;
  EXPECT_EQ(Where(r), (std::vector<std::string>{"A1:0", "A2:0"}));
  // One host: local ranks count across both agents.
  EXPECT_EQ(r.ranks[1].local_rank, 1);
  EXPECT_EQ(r.ranks[1].local_size, 2);
}

TEST(PlacementTest, UnevenHostsMatchHorovod) {
  // -H a:3,b:1,c:2 with np=6: local sizes 3,1,2.
  std::vector<AgentSlots> agents = {Agent("A", "a", 3, 0), Agent("B", "b", 1, 1),
                                    Agent("C", "c", 2, 2)};
  PlacementResult r = Place(agents, Req(6, {{"a", 3}, {"b", 1}, {"c", 2}}));
  ASSERT_EQ(r.outcome, PlacementOutcome::kPlaced) << r.reason;
  ExpectHorovodMath(r);
  // Spelled out: rank 4 is c's local 0 -> third host with a local 0 (a, b, c).
  EXPECT_EQ(r.ranks[4].local_rank, 0);
  EXPECT_EQ(r.ranks[4].cross_rank, 2);
  EXPECT_EQ(r.ranks[4].cross_size, 3);
  // Rank 5 is c's local 1: hosts with a local 1 are a and c.
  EXPECT_EQ(r.ranks[5].local_rank, 1);
  EXPECT_EQ(r.ranks[5].cross_rank, 1);
  EXPECT_EQ(r.ranks[5].cross_size, 2);
  // Rank 2 is a's local 2: a alone.
  EXPECT_EQ(r.ranks[2].cross_rank, 0);
  EXPECT_EQ(r.ranks[2].cross_size, 1);
}

TEST(PlacementTest, ManyShapesMatchHorovod) {
  // Every combination of up to four hosts with 1..4 slots, every np that fits.
  for (int hosts = 1; hosts <= 4; ++hosts) {
    for (int mask = 0; mask < (1 << (2 * hosts)); ++mask) {
      std::vector<AgentSlots> agents;
      std::vector<HostRequest> req;
      int total = 0;
      for (int h = 0; h < hosts; ++h) {
        const int slots = 1 + ((mask >> (2 * h)) & 3);
        const std::string name = "h" + std::to_string(h);
        agents.push_back(Agent("id" + std::to_string(h), name, slots, hosts - h));
        req.push_back({name, slots});
        total += slots;
      }
      for (int np = 1; np <= total; ++np) {
        SCOPED_TRACE("hosts=" + std::to_string(hosts) + " mask=" + std::to_string(mask) +
                     " np=" + std::to_string(np));
        PlacementResult with_hosts = Place(agents, Req(np, req));
        ASSERT_EQ(with_hosts.outcome, PlacementOutcome::kPlaced) << with_hosts.reason;
        ExpectHorovodMath(with_hosts);
        PlacementResult any = Place(agents, Req(np));
        ASSERT_EQ(any.outcome, PlacementOutcome::kPlaced) << any.reason;
        ExpectHorovodMath(any);
      }
    }
  }
}

TEST(PlacementTest, ComputeHandlesInterleavedHosts) {
  // Not produced by Place, but the math must still follow Horovod's definition.
  std::vector<RankSlot> ranks(5);
  const char* hosts[] = {"a", "b", "a", "c", "b"};
  for (int i = 0; i < 5; ++i) {
    ranks[i].rank = i;
    ranks[i].host = hosts[i];
  }
  ComputeLocalAndCrossRanks(&ranks);
  PlacementResult r{PlacementOutcome::kPlaced, "", ranks};
  ExpectHorovodMath(r);
}

}  // namespace
}  // namespace hvd::control
