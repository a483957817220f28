#include "control/iface_choice.h"

#include <gtest/gtest.h>

#include "testutil/expect.h"

namespace hvd::control {
namespace {

NetInterface If(const std::string& name, const std::string& addr, int len = 24) {
  return {name, addr, len, name == "lo", true};
}

// host-a, host-b, ... with eth0 10.77.0.(11+i)/24 (their route to the launcher) and decoy0
// 172.31.0.(11+i)/24 on each.
std::vector<ProbeHost> Hosts(int n) {
  std::vector<ProbeHost> hosts;
  for (int i = 0; i < n; ++i) {
    ProbeHost h;
    h.agent_id = "agent-" + std::to_string(i);
    h.host = std::string("host-") + static_cast<char>('a' + i);
    h.advertise_addr = "10.77.0." + std::to_string(11 + i);
    h.interfaces = {If("lo", "127.0.0.1", 8), If("eth0", h.advertise_addr),
                    If("decoy0", "172.31.0." + std::to_string(11 + i))};
    hosts.push_back(h);
  }
  return hosts;
}

std::vector<InterfaceSelector> Sel(const std::string& text) {
  std::vector<InterfaceSelector> v;
  EXPECT_TRUE(ParseInterfaceSelectors(text, &v).ok()) << text;
  return v;
}

// Every dial of every candidate succeeds, except those listed as {candidate, pair, error}.
struct Failure {
  int candidate, pair;
  std::string error;
};
ProbeOutcomes Outcomes(const Candidates& c, int hosts, const std::vector<Failure>& failures = {}) {
  ProbeOutcomes o(c.list.size(), std::vector<DialOutcome>(RingPairs(hosts).size(), {true, "", 80}));
  for (const Failure& f : failures) o[f.candidate][f.pair] = {false, f.error, 0};
  return o;
}

TEST(RingPairs, SuccessorsAndBothWaysForTwo) {
  EXPECT_TRUE(RingPairs(1).empty());
  EXPECT_EQ(RingPairs(2), (std::vector<std::pair<int, int>>{{0, 1}, {1, 0}}));
  EXPECT_EQ(RingPairs(3), (std::vector<std::pair<int, int>>{{0, 1}, {1, 2}, {2, 0}}));
  EXPECT_EQ(RingPairs(4).size(), 4u);
  EXPECT_EQ(RingPairs(4).back(), (std::pair<int, int>{3, 0}));
}

TEST(BuildCandidates, RouteFirstThenCommonInterfacesByName) {
  Candidates c;
  ASSERT_TRUE(BuildCandidates(Hosts(3), {}, &c).ok());
  ASSERT_EQ(c.list.size(), 2u);
  EXPECT_TRUE(c.probe);
  EXPECT_EQ(c.list[0].label, "eth0");  // the advertised addresses, all on eth0
  EXPECT_EQ(c.list[0].addrs, (std::vector<std::string>{"10.77.0.11", "10.77.0.12", "10.77.0.13"}));
  EXPECT_EQ(c.list[1].label, "decoy0");  // eth0 is not repeated; lo is never a candidate
  EXPECT_EQ(c.list[1].ifaces, (std::vector<std::string>{"decoy0", "decoy0", "decoy0"}));
}

TEST(BuildCandidates, OnlyInterfacesUpOnEveryHost) {
  auto hosts = Hosts(3);
  hosts[0].interfaces.push_back(If("ib0", "192.168.0.1"));
  hosts[1].interfaces.push_back(If("ib0", "192.168.0.2"));  // host-c has none
  hosts[2].interfaces[2].up = false;                        // decoy0 down on host-c
  Candidates c;
  ASSERT_TRUE(BuildCandidates(hosts, {}, &c).ok());
  ASSERT_EQ(c.list.size(), 1u);
  EXPECT_EQ(c.list[0].label, "eth0");
}

TEST(BuildCandidates, MixedRouteInterfacesAreLabelledAsSuch) {
  auto hosts = Hosts(2);
  hosts[1].interfaces[1].name = "ens5";
  Candidates c;
  ASSERT_TRUE(BuildCandidates(hosts, {}, &c).ok());
  EXPECT_EQ(c.list[0].label, "the advertised addresses");
  EXPECT_EQ(c.list[0].ifaces, (std::vector<std::string>{"eth0", "ens5"}));
}

TEST(BuildCandidates, AllLoopbackIsOneMachineWithoutProbe) {
  auto hosts = Hosts(2);
  for (ProbeHost& h : hosts) h.advertise_addr = "127.0.0.1";
  Candidates c;
  ASSERT_TRUE(BuildCandidates(hosts, {}, &c).ok());
  EXPECT_FALSE(c.probe);
  ASSERT_EQ(c.list.size(), 1u);
  EXPECT_EQ(c.list[0].label, "lo");
  NetworkReport r = Choose(hosts, c, {});
  EXPECT_TRUE(r.ok);
  EXPECT_TRUE(r.dials.empty());
}

TEST(BuildCandidates, SelectorsInTheirOrderNamesAndSubnets) {
  Candidates c;
  ASSERT_TRUE(BuildCandidates(Hosts(3), Sel("decoy0,10.77.0.0/16"), &c).ok());
  ASSERT_EQ(c.list.size(), 2u);
  EXPECT_EQ(c.list[0].label, "decoy0");
  EXPECT_EQ(c.list[1].label, "10.77.0.0/16");
  EXPECT_EQ(c.list[1].ifaces, (std::vector<std::string>{"eth0", "eth0", "eth0"}));
  // "lo" may be chosen on purpose.
  ASSERT_TRUE(BuildCandidates(Hosts(2), Sel("lo"), &c).ok());
  EXPECT_EQ(c.list[0].addrs, (std::vector<std::string>{"127.0.0.1", "127.0.0.1"}));
}

TEST(BuildCandidates, ImpossibleSelectorsAreSkippedOrFailWithTheHostsInterfaces) {
  auto hosts = Hosts(3);
  hosts[0].interfaces.push_back(If("ib0", "192.168.0.1"));
  Candidates c;
  ASSERT_TRUE(BuildCandidates(hosts, Sel("ib0,eth0"), &c).ok());
  ASSERT_EQ(c.list.size(), 1u);
  EXPECT_EQ(c.list[0].label, "eth0");
  EXPECT_EQ(c.impossible, (std::vector<std::string>{"ib0: host-b has no up interface ib0"}));

  Status s = BuildCandidates(hosts, Sel("ib0,10.9.0.0/16"), &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(s.message(), "ib0: host-b has no up interface ib0");
  EXPECT_HAS(s.message(), "10.9.0.0/16: host-a has no up address in 10.9.0.0/16");
  EXPECT_HAS(s.message(), "host-c: lo 127.0.0.1/8, eth0 10.77.0.13/24, decoy0 172.31.0.13/24");
}

TEST(Choose, TheFirstCandidateThatWorksEverywhereAndWhatWasSkipped) {
  const auto hosts = Hosts(3);
  Candidates c;
  ASSERT_TRUE(BuildCandidates(hosts, Sel("decoy0,eth0"), &c).ok());
  // decoy0: host-b -> host-c (pair 1) times out.
  NetworkReport r =
      Choose(hosts, c, Outcomes(c, 3, {{0, 1, "no answer within 500 ms"}, {0, 2, "refused"}}));
  ASSERT_TRUE(r.ok) << r.summary;
  EXPECT_EQ(r.chosen, "eth0");
  EXPECT_EQ(r.summary,
            "using eth0 (10.77.0.0/24) on all 3 hosts; skipped decoy0: host-b could not reach "
            "host-c at 172.31.0.13 (no answer within 500 ms)");
  ASSERT_EQ(r.hosts.size(), 3u);
  EXPECT_EQ(r.hosts[1].host, "host-b");
  EXPECT_EQ(r.hosts[1].iface, "eth0");
  EXPECT_EQ(r.hosts[1].address, "10.77.0.12");
  ASSERT_EQ(r.dials.size(), 6u);  // every dial is recorded
  EXPECT_EQ(r.dials[1].candidate, "decoy0");
  EXPECT_EQ(r.dials[1].from, "host-b");
  EXPECT_EQ(r.dials[1].to, "host-c");
  EXPECT_FALSE(r.dials[1].ok);
  EXPECT_TRUE(r.dials[3].ok);
  std::string addr, iface;
  ASSERT_TRUE(ChoiceFor(r, "agent-2", &addr, &iface));
  EXPECT_EQ(addr, "10.77.0.13");
  EXPECT_EQ(iface, "eth0");
  EXPECT_FALSE(ChoiceFor(r, "agent-9", &addr, &iface));
}

TEST(Choose, PreferenceOrderWinsWhenSeveralWork) {
  const auto hosts = Hosts(2);
  Candidates c;
  ASSERT_TRUE(BuildCandidates(hosts, {}, &c).ok());
  NetworkReport r = Choose(hosts, c, Outcomes(c, 2));
  EXPECT_EQ(r.chosen, "eth0");
  EXPECT_EQ(r.summary, "using eth0 (10.77.0.0/24) on all 2 hosts");
}

TEST(Choose, NothingWorksNamesEveryCandidatesFirstFailingPair) {
  const auto hosts = Hosts(3);
  Candidates c;
  ASSERT_TRUE(BuildCandidates(hosts, {}, &c).ok());
  NetworkReport r = Choose(hosts, c,
                           Outcomes(c, 3,
                                    {{0, 2, "connect: No route to host"},
                                     {1, 0, "no answer within 500 ms"},
                                     {1, 1, "no answer within 500 ms"}}));
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.hosts.empty());
  EXPECT_EQ(r.summary,
            "no network works between all 3 hosts: eth0: host-c could not reach host-a at "
            "10.77.0.11 (connect: No route to host); decoy0: host-a could not reach host-b at "
            "172.31.0.12 (no answer within 500 ms)");
  std::string addr, iface;
  EXPECT_FALSE(ChoiceFor(r, "agent-0", &addr, &iface));
}

TEST(Choose, MissingOutcomesCountAsFailures) {
  const auto hosts = Hosts(2);
  Candidates c;
  ASSERT_TRUE(BuildCandidates(hosts, Sel("eth0"), &c).ok());
  NetworkReport r = Choose(hosts, c, {});
  EXPECT_FALSE(r.ok);
  EXPECT_HAS(r.summary, "host-a could not reach host-b at 10.77.0.12 (no result)");
}

TEST(Choose, AddressesInDifferentSubnetsAreListed) {
  auto hosts = Hosts(2);
  hosts[1].advertise_addr = "10.78.0.5";
  hosts[1].interfaces[1].address = "10.78.0.5";
  Candidates c;
  ASSERT_TRUE(BuildCandidates(hosts, Sel("eth0"), &c).ok());
  NetworkReport r = Choose(hosts, c, Outcomes(c, 2));
  EXPECT_EQ(r.summary, "using eth0 (10.77.0.11, 10.78.0.5) on all 2 hosts");
}

TEST(Choose, OneHostWithASelectorNeedsNoProbe) {
  const auto hosts = Hosts(1);
  Candidates c;
  ASSERT_TRUE(BuildCandidates(hosts, Sel("decoy0"), &c).ok());
  EXPECT_FALSE(c.probe);
  NetworkReport r = Choose(hosts, c, {});
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.summary, "using decoy0 (172.31.0.0/24) on its one host");
  EXPECT_EQ(r.hosts[0].address, "172.31.0.11");
}

}  // namespace
}  // namespace hvd::control
