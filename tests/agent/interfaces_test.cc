#include "agent/interfaces.h"

#include <gtest/gtest.h>

#include "testutil/expect.h"

namespace hvd::agent {
namespace {

using control::InterfaceSelector;
using control::NetInterface;

const std::vector<NetInterface> kHost = {
    {"lo", "127.0.0.1", 8, true, true},     {"docker0", "172.17.0.1", 16, false, true},
    {"eth0", "10.0.0.2", 24, false, true},  {"ib0", "192.168.10.2", 24, false, true},
    {"eth2", "10.9.0.2", 24, false, false},  // down
};

std::vector<InterfaceSelector> Sel(const std::string& text) {
  std::vector<InterfaceSelector> v;
  EXPECT_TRUE(control::ParseInterfaceSelectors(text, &v).ok()) << text;
  return v;
}

TEST(ListInterfaces, FindsLoopback) {
  std::vector<NetInterface> list;
  ASSERT_TRUE(ListInterfaces(&list).ok());
  const NetInterface* lo = control::InterfaceWithAddress(list, "127.0.0.1");
  ASSERT_NE(lo, nullptr) << control::FormatInterfaces(list);
  EXPECT_TRUE(lo->loopback);
  EXPECT_EQ(lo->prefix_len, 8);
}

TEST(ChooseAdvertiseAddress, TheRouteTowardsTheLauncherNotTheFirstInterface) {
  AdvertiseChoice c;
  ASSERT_TRUE(ChooseAdvertiseAddress("", "10.0.0.2", kHost, {}, &c).ok());
  EXPECT_EQ(c.address, "10.0.0.2");  // docker0 comes first in the list but is not the route
  EXPECT_EQ(c.iface, "eth0");
  EXPECT_EQ(c.note, "");
}

TEST(ChooseAdvertiseAddress, GivenAddressWins) {
  AdvertiseChoice c;
  ASSERT_TRUE(ChooseAdvertiseAddress("192.168.10.2", "10.0.0.2", kHost, Sel("eth0"), &c).ok());
  EXPECT_EQ(c.address, "192.168.10.2");
  EXPECT_EQ(c.iface, "ib0");
  ASSERT_TRUE(ChooseAdvertiseAddress("203.0.113.7", "10.0.0.2", kHost, {}, &c).ok());
  EXPECT_EQ(c.iface, "");  // a NAT address is on no interface here
}

TEST(ChooseAdvertiseAddress, SelectorsKeepTheRouteWhenItIsSelected) {
  AdvertiseChoice c;
  ASSERT_TRUE(ChooseAdvertiseAddress("", "10.0.0.2", kHost, Sel("ib0,eth0"), &c).ok());
  EXPECT_EQ(c.address, "10.0.0.2");
  ASSERT_TRUE(ChooseAdvertiseAddress("", "10.0.0.2", kHost, Sel("10.0.0.0/8"), &c).ok());
  EXPECT_EQ(c.address, "10.0.0.2");
}

TEST(ChooseAdvertiseAddress, SelectorsPickAnotherInterfaceInTheirOrder) {
  AdvertiseChoice c;
  ASSERT_TRUE(ChooseAdvertiseAddress("", "10.0.0.2", kHost, Sel("eth2,ib0"), &c).ok());
  EXPECT_EQ(c.address, "192.168.10.2");  // eth2 is down
  EXPECT_EQ(c.iface, "ib0");
  EXPECT_HAS(c.note, "advertising 192.168.10.2 on ib0 (--network-interface ib0)");
  EXPECT_HAS(c.note, "the launcher is reached from 10.0.0.2");
  ASSERT_TRUE(ChooseAdvertiseAddress("", "", kHost, Sel("192.168.0.0/16"), &c).ok());
  EXPECT_EQ(c.address, "192.168.10.2");
}

TEST(ChooseAdvertiseAddress, NothingSelectedOrNoRouteIsAnError) {
  AdvertiseChoice c;
  Status s = ChooseAdvertiseAddress("", "10.0.0.2", kHost, Sel("eth2"), &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(s.message(), "--network-interface eth2 selects no interface that is up");
  EXPECT_HAS(s.message(), "eth2 10.9.0.2/24 (down)");
  s = ChooseAdvertiseAddress("", "", kHost, {}, &c);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
}

TEST(ParseAgentSelectors, ChecksThisHost) {
  std::vector<InterfaceSelector> v;
  ASSERT_TRUE(ParseAgentSelectors("lo", "h", &v).ok());
  ASSERT_TRUE(ParseAgentSelectors("127.0.0.0/8", "h", &v).ok());
  Status s = ParseAgentSelectors("no-such-if0", "node-x", &v);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(s.message(), "--network-interface: node-x has no interface no-such-if0");
  EXPECT_HAS(s.message(), "lo 127.0.0.1/8");
  s = ParseAgentSelectors("10.0.0.0/99", "node-x", &v);
  EXPECT_HAS(s.message(), "--network-interface: '10.0.0.0/99' is not an IPv4 subnet");
}

}  // namespace
}  // namespace hvd::agent
