#include "control/netif.h"

#include <gtest/gtest.h>

#include "testutil/expect.h"

namespace hvd::control {
namespace {

NetInterface If(const std::string& name, const std::string& addr, int len = 24) {
  return {name, addr, len, name == "lo", true};
}

TEST(ParseIPv4, AcceptsDottedQuads) {
  uint32_t a = 0;
  ASSERT_TRUE(ParseIPv4("10.0.0.2", &a).ok());
  EXPECT_EQ(a, 0x0a000002u);
  ASSERT_TRUE(ParseIPv4("255.255.255.255", &a).ok());
  EXPECT_EQ(a, 0xffffffffu);
  ASSERT_TRUE(ParseIPv4("0.0.0.0", &a).ok());
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(FormatIPv4(0xac1f000bu), "172.31.0.11");
}

TEST(ParseIPv4, RefusesEverythingElse) {
  uint32_t a = 0;
  for (const char* bad : {"", "10", "10.0.0", "10.0.0.2.", "10.0.0.2.1", "256.0.0.1", "1.2.3.-4",
                          "a.b.c.d", "10..0.1", " 10.0.0.1", "10.0.0.1 ", "1234.0.0.1", "::1"}) {
    Status s = ParseIPv4(bad, &a);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_HAS(s.message(), "is not an IPv4 address");
  }
}

TEST(Cidr, ParsesAndMasksHostBits) {
  Cidr c;
  ASSERT_TRUE(ParseCidr("10.1.2.3/16", &c).ok());
  EXPECT_EQ(FormatCidr(c), "10.1.0.0/16");
  ASSERT_TRUE(ParseCidr("192.168.7.9", &c).ok());
  EXPECT_EQ(c.prefix_len, 32);
  ASSERT_TRUE(ParseCidr("0.0.0.0/0", &c).ok());
  EXPECT_TRUE(CidrContains(c, "8.8.8.8"));
  ASSERT_TRUE(ParseCidr("172.31.0.0/24", &c).ok());
  EXPECT_TRUE(CidrContains(c, "172.31.0.11"));
  EXPECT_TRUE(CidrContains(c, "172.31.0.255"));
  EXPECT_FALSE(CidrContains(c, "172.31.1.0"));
  EXPECT_FALSE(CidrContains(c, "not-an-address"));
  ASSERT_TRUE(ParseCidr("10.0.0.5/32", &c).ok());
  EXPECT_TRUE(CidrContains(c, "10.0.0.5"));
  EXPECT_FALSE(CidrContains(c, "10.0.0.4"));
}

TEST(Cidr, BadSubnetsSayWhatIsExpected) {
  Cidr c;
  for (const char* bad : {"10.0.0.0/33", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8x", "10.0.0/8",
                          "/8", "10.0.0.0/100"}) {
    Status s = ParseCidr(bad, &c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_HAS(s.message(), std::string("'") + bad + "' is not an IPv4 subnet");
    EXPECT_HAS(s.message(), "10.0.0.0/8");
  }
  EXPECT_HAS(ParseCidr("10.0.0.0/33", &c).message(), "prefix length after '/' must be 0 to 32");
}

TEST(Selectors, NamesAndSubnetsInOrder) {
  std::vector<InterfaceSelector> v;
  ASSERT_TRUE(ParseInterfaceSelectors("eth1,10.0.0.0/8,ib0,192.168.1.7", &v).ok());
  ASSERT_EQ(v.size(), 4u);
  EXPECT_FALSE(v[0].is_cidr);
  EXPECT_EQ(v[0].text, "eth1");
  EXPECT_TRUE(v[1].is_cidr);
  EXPECT_EQ(v[1].cidr.prefix_len, 8);
  EXPECT_FALSE(v[2].is_cidr);
  EXPECT_TRUE(v[3].is_cidr);  // a bare address is a /32
  EXPECT_EQ(v[3].cidr.prefix_len, 32);
  ASSERT_TRUE(ParseInterfaceSelectors("", &v).ok());
  EXPECT_TRUE(v.empty());
  ASSERT_TRUE(ParseInterfaceSelectors("eth0.100", &v).ok());  // VLAN names have dots
  EXPECT_FALSE(v[0].is_cidr);
}

TEST(Selectors, BadEntriesAreNamed) {
  std::vector<InterfaceSelector> v;
  struct Case {
    const char* text;
    const char* says;
  } cases[] = {
      {"eth0,", "has an empty entry"},
      {",eth0", "has an empty entry"},
      {"eth0,,eth1", "has an empty entry"},
      {"eth0,eth0", "names eth0 twice"},
      {"10.0.0.0/40", "'10.0.0.0/40' is not an IPv4 subnet"},
      {"10.0.0", "'10.0.0' is not an IPv4 subnet"},
      {"averyveryverylongname", "longer than 15 characters"},
      {"eth 0", "is not an interface name"},
      {"eth0:1", "is not an interface name"},
  };
  for (const Case& c : cases) {
    Status s = ParseInterfaceSelectors(c.text, &v);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_HAS(s.message(), c.says);
  }
  EXPECT_HAS(ParseInterfaceSelectors("eth0,", &v).message(), "--network-interface eth1,ib0");
}

TEST(Selectors, MatchByNameOrSubnet) {
  std::vector<InterfaceSelector> v;
  ASSERT_TRUE(ParseInterfaceSelectors("eth1,172.31.0.0/16", &v).ok());
  EXPECT_TRUE(SelectorMatches(v[0], If("eth1", "10.0.0.1")));
  EXPECT_FALSE(SelectorMatches(v[0], If("eth10", "10.0.0.1")));  // names match exactly
  EXPECT_TRUE(SelectorMatches(v[1], If("docker0", "172.31.5.1")));
  EXPECT_FALSE(SelectorMatches(v[1], If("eth1", "10.0.0.1")));
  EXPECT_TRUE(AnySelectorMatches(v, If("docker0", "172.31.5.1")));
  EXPECT_FALSE(AnySelectorMatches(v, If("eth0", "192.168.0.1")));
  EXPECT_TRUE(AnySelectorMatches({}, If("eth0", "192.168.0.1")));
}

TEST(Selectors, CheckedAgainstAHostsInterfaces) {
  const std::vector<NetInterface> host = {If("lo", "127.0.0.1", 8), If("eth0", "10.77.0.12"),
                                          If("decoy0", "172.31.0.12")};
  std::vector<InterfaceSelector> v;
  ASSERT_TRUE(ParseInterfaceSelectors("eth0,172.31.0.0/24", &v).ok());
  EXPECT_TRUE(CheckSelectors(v, host, "host-b").ok());
  ASSERT_TRUE(ParseInterfaceSelectors("eth9", &v).ok());
  Status s = CheckSelectors(v, host, "host-b");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(s.message(), "host-b has no interface eth9");
  EXPECT_HAS(s.message(), "it has: lo 127.0.0.1/8, eth0 10.77.0.12/24, decoy0 172.31.0.12/24");
  ASSERT_TRUE(ParseInterfaceSelectors("10.9.0.0/16", &v).ok());
  EXPECT_HAS(CheckSelectors(v, host, "host-b").message(), "no address of host-b is in 10.9.0.0/16");
}

TEST(Interfaces, FormatAndLookup) {
  NetInterface down = If("eth1", "10.0.0.3");
  down.up = false;
  EXPECT_EQ(FormatInterface(down), "eth1 10.0.0.3/24 (down)");
  EXPECT_EQ(FormatInterfaces({}), "none");
  const std::vector<NetInterface> list = {If("eth0", "10.0.0.2"), If("eth0", "10.0.1.2")};
  ASSERT_NE(InterfaceWithAddress(list, "10.0.1.2"), nullptr);
  EXPECT_EQ(InterfaceWithAddress(list, "10.0.1.2")->name, "eth0");
  EXPECT_EQ(InterfaceWithAddress(list, "10.0.9.9"), nullptr);
}

}  // namespace
}  // namespace hvd::control
