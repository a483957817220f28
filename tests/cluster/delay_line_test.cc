// The namespace cluster's delayed links without tc netem (delay_line.h): every packet between two
// hosts waits the delay each way, so a TCP handshake and a request-reply exchange each take at
// least twice the delay, and a few MiB arrive intact through the relay. Also the delay's parsing
// and the options refused.
// Only the lower bound of a time is checked: a loaded machine can only add to it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cluster/netns.h"

namespace hvd::clustertest {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST(DelayLineTest, ParsesTcTimes) {
  microseconds d{};
  ASSERT_TRUE(NetnsCluster::ParseDelay("100us", &d).ok());
  EXPECT_EQ(d.count(), 100);
  ASSERT_TRUE(NetnsCluster::ParseDelay("1.5ms", &d).ok());
  EXPECT_EQ(d.count(), 1500);
  ASSERT_TRUE(NetnsCluster::ParseDelay("2s", &d).ok());
  EXPECT_EQ(d.count(), 2000000);
  ASSERT_TRUE(NetnsCluster::ParseDelay("250usec", &d).ok());
  EXPECT_EQ(d.count(), 250);
  for (const char* bad : {"", "ms", "5", "5 ms", "-1ms", "1h", "61s", "nanus"}) {
    Status s = NetnsCluster::ParseDelay(bad, &d);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("us, ms or s"), std::string::npos) << s.message();
  }
  NetnsOptions o;
  o.delay = "1ms";
  o.delay_by = "sleep";
  std::unique_ptr<NetnsCluster> c;
  Status s = NetnsCluster::Create(o, &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("netem or relay"), std::string::npos) << s.message();
  o.delay = "";
  o.delay_by = "relay";
  s = NetnsCluster::Create(o, &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("without a delay"), std::string::npos) << s.message();
}

// Sets a 20 s bound on every blocking call of `fd`.
void Bound(int fd) {
  timeval tv{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

sockaddr_in Addr(const std::string& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

TEST(DelayLineTest, EveryPacketWaitsTheDelayAndArrivesIntact) {
  NetnsOptions o;
  o.hosts = 2;
  o.delay = "20ms";
  o.delay_by = "relay";  // the relay even where the kernel has netem
  std::unique_ptr<NetnsCluster> c;
  Status s = NetnsCluster::Create(o, &c);
  if (s.code() == StatusCode::kFailedPrecondition) GTEST_SKIP() << s.message();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c->delay_by(), "relay");
  const auto round_trip = milliseconds(40);

  int server = -1, client = -1;
  ASSERT_TRUE(NetnsCluster::SocketIn(c->host_ns(1), &server).ok());
  ASSERT_TRUE(NetnsCluster::SocketIn(c->host_ns(0), &client).ok());
  Bound(server);
  Bound(client);
  sockaddr_in at = Addr(c->host_addr(1), 0);
  ASSERT_EQ(bind(server, reinterpret_cast<sockaddr*>(&at), sizeof(at)), 0);
  ASSERT_EQ(listen(server, 1), 0);
  socklen_t len = sizeof(at);
  ASSERT_EQ(getsockname(server, reinterpret_cast<sockaddr*>(&at), &len), 0);

  // The handshake: SYN there, SYN-ACK back.
  Clock::time_point start = Clock::now();
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&at), sizeof(at)), 0);
  EXPECT_GE(Clock::now() - start, round_trip);
  const int conn = accept(server, nullptr, nullptr);
  ASSERT_GE(conn, 0);
  Bound(conn);

  // 4 MiB host-a -> host-b, checked byte for byte.
  std::vector<unsigned char> out(4 << 20), in(out.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<unsigned char>(i * 131 + (i >> 13));
  std::thread writer([&] {
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t w = write(client, out.data() + done, out.size() - done);
      if (w <= 0) break;
      done += static_cast<size_t>(w);
    }
  });
  size_t got = 0;
  while (got < in.size()) {
    const ssize_t r = read(conn, in.data() + got, in.size() - got);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  writer.join();
  ASSERT_EQ(got, in.size());
  EXPECT_TRUE(in == out);

  // A request and its reply.
  char byte = 'x';
  start = Clock::now();
  ASSERT_EQ(write(client, &byte, 1), 1);
  ASSERT_EQ(read(conn, &byte, 1), 1);
  ASSERT_EQ(write(conn, &byte, 1), 1);
  ASSERT_EQ(read(client, &byte, 1), 1);
  EXPECT_GE(Clock::now() - start, round_trip);
  EXPECT_GT(c->relay()->relayed(), 0);
  close(conn);
  close(client);
  close(server);
  EXPECT_TRUE(c->Destroy().ok());
}

}  // namespace
}  // namespace hvd::clustertest
