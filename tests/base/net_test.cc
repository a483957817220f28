// base/net.h: "HOST:PORT" parsing under each caller's rules, with errors that name the text and
// what was wrong; IPv4 resolution; the host name.
#include "base/net.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string>

namespace hvd::base {
namespace {

std::string Error(std::string_view text, HostPortRules rules = {}) {
  HostPort hp;
  Status s = ParseHostPort(text, rules, &hp);
  EXPECT_FALSE(s.ok()) << text << " parsed as " << hp.host << " " << hp.port;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  return s.message();
}

TEST(ParseHostPortTest, SplitsAtTheLastColonAndDropsBrackets) {
  HostPort hp;
  ASSERT_TRUE(ParseHostPort("10.0.0.5:7070", &hp).ok());
  EXPECT_EQ(hp.host, "10.0.0.5");
  EXPECT_EQ(hp.port, 7070);
  ASSERT_TRUE(ParseHostPort("node-a.example:1", &hp).ok());
  EXPECT_EQ(hp.host, "node-a.example");
  EXPECT_EQ(hp.port, 1);
  ASSERT_TRUE(ParseHostPort("[::1]:65535", &hp).ok());
  EXPECT_EQ(hp.host, "::1");
  EXPECT_EQ(hp.port, 65535);
  ASSERT_TRUE(ParseHostPort("::1:80", &hp).ok());
  EXPECT_EQ(hp.host, "::1");
  EXPECT_EQ(hp.port, 80);
}

TEST(ParseHostPortTest, MalformedTextIsNamedWithTheExpectedForm) {
  EXPECT_EQ(Error("nohostport"), "'nohostport' is not HOST:PORT");
  EXPECT_EQ(Error("host:"), "'host:' is not HOST:PORT");
  EXPECT_EQ(Error(":7070"), "':7070' is not HOST:PORT");
  EXPECT_EQ(Error(""), "'' is not HOST:PORT");
  HostPortRules with_example;
  with_example.example = "0.0.0.0:7070";
  EXPECT_EQ(Error("x", with_example), "'x' is not HOST:PORT (e.g. 0.0.0.0:7070)");
}

TEST(ParseHostPortTest, BadPortsSayTheRange) {
  for (const char* bad : {"h:0", "h:65536", "h:99999999999", "h:-1", "h:+80", "h: 80", "h:8o"}) {
    const std::string text = bad;
    EXPECT_EQ(Error(text), "'" + text + "': the port must be 1..65535");
  }
  HostPortRules listener;
  listener.port_zero = true;
  EXPECT_EQ(Error("h:70000", listener), "'h:70000': the port must be 0..65535 (0: any free port)");
}

TEST(ParseHostPortTest, ListenerRulesAllowPortZeroAndAnEmptyHost) {
  HostPortRules listener;
  listener.port_zero = true;
  listener.empty_host = true;
  HostPort hp;
  ASSERT_TRUE(ParseHostPort("127.0.0.1:0", listener, &hp).ok());
  EXPECT_EQ(hp.port, 0);
  ASSERT_TRUE(ParseHostPort(":7070", listener, &hp).ok());
  EXPECT_EQ(hp.host, "");
  EXPECT_EQ(hp.port, 7070);
}

TEST(ResolveIPv4Test, DottedAddressesAndLocalhostResolve) {
  sockaddr_in a{};
  ASSERT_TRUE(ResolveIPv4("127.0.0.2", 4711, &a).ok());
  EXPECT_EQ(a.sin_family, AF_INET);
  EXPECT_EQ(ntohs(a.sin_port), 4711);
  EXPECT_EQ(ntohl(a.sin_addr.s_addr), 0x7f000002u);
  ASSERT_TRUE(ResolveIPv4("localhost", 0, &a).ok());
  EXPECT_EQ(ntohl(a.sin_addr.s_addr) >> 24, 127u);
}

TEST(ResolveIPv4Test, FailuresNameTheHost) {
  sockaddr_in a{};
  Status s = ResolveIPv4("no-such-host.invalid", 80, &a);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot resolve 'no-such-host.invalid' to an IPv4 address: "),
            std::string::npos)
      << s.message();
  s = ResolveIPv4("127.0.0.1", 65536, &a);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "port 65536 out of range");
}

TEST(LocalHostNameTest, NeverEmptyWithAFallback) {
  EXPECT_FALSE(LocalHostName().empty());
  EXPECT_EQ(LocalHostName("x").empty(), false);
}

}  // namespace
}  // namespace hvd::base
