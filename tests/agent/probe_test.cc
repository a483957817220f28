// The agent's side of the network probe, on 127.0.0.1 only: the greeting check, the dialer's
// errors and deadlines, and the Prober's LISTEN / DIAL / DONE steps.
#include "agent/probe.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>

#include "agent/probe_dial.h"
#include "testutil/expect.h"

namespace hvd::agent {
namespace {

using std::chrono::milliseconds;

// A probe listener greeting as `agent` until the test ends.
class Served {
 public:
  Served(const std::string& probe, const std::string& agent) {
    EXPECT_TRUE(OpenProbeListener(&fd_, &port_).ok());
    stop_ = eventfd(0, EFD_CLOEXEC);
    thread_ = std::thread([this, g = ProbeGreeting(probe, agent)] {
      ServeProbe(fd_, stop_, g, std::chrono::steady_clock::now() + std::chrono::seconds(20));
    });
  }
  ~Served() {
    const uint64_t one = 1;
    (void)!write(stop_, &one, sizeof one);
    thread_.join();
    close(fd_);
    close(stop_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1, stop_ = -1, port_ = 0;
  std::thread thread_;
};

// A port that accepts connections (the kernel completes them) but never says anything.
int SilentPort(int* fd) {
  *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(bind(*fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(listen(*fd, 8), 0);
  getsockname(*fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

int ClosedPort() {
  int fd = -1;
  const int port = SilentPort(&fd);
  close(fd);
  return port;
}

TEST(ProbeDial, TheRightAgentAnswers) {
  Served a("p1", "agent-a");
  const auto r = DialAll({{"127.0.0.1", a.port(), "agent-a"}}, "p1", milliseconds(2000));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].ok) << r[0].error;
  EXPECT_GT(r[0].micros, 0);
}

TEST(ProbeDial, WrongAgentWrongProbeNothingAndSilence) {
  Served a("p1", "agent-a");
  int silent_fd = -1;
  const int silent = SilentPort(&silent_fd);
  const int closed = ClosedPort();
  const auto start = std::chrono::steady_clock::now();
  const auto r = DialAll({{"127.0.0.1", a.port(), "agent-b"},
                          {"127.0.0.1", a.port(), "agent-a"},
                          {"127.0.0.1", closed, "agent-a"},
                          {"127.0.0.1", silent, "agent-a"},
                          {"no-such-host.invalid", 1, "agent-a"}},
                         "p2", milliseconds(300));
  const auto took = std::chrono::steady_clock::now() - start;
  close(silent_fd);
  ASSERT_EQ(r.size(), 5u);
  EXPECT_FALSE(r[0].ok);
  EXPECT_EQ(r[0].error, "answered by another probe's listener");  // probe p1, not p2
  EXPECT_FALSE(r[2].ok);
  EXPECT_EQ(r[2].error, "connect: Connection refused");
  EXPECT_FALSE(r[3].ok);
  EXPECT_EQ(r[3].error, "connected, but no greeting within 300 ms");
  EXPECT_FALSE(r[4].ok);
  EXPECT_HAS(r[4].error, "cannot resolve 'no-such-host.invalid'");
  // All at once, within the one deadline (plus slack for a loaded machine).
  EXPECT_LT(took, milliseconds(3000));
}

TEST(ProbeDial, AnotherAgentOfTheSameProbe) {
  Served a("p3", "agent-a");
  const auto r = DialAll({{"127.0.0.1", a.port(), "agent-c"}}, "p3", milliseconds(2000));
  EXPECT_EQ(r[0].error,
            "answered by agent agent-a, not agent-c (the address leads to another host)");
}

// Collects what a Prober sends.
struct Sink {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<hvd::v1::NetworkProbeReport> reports;

  Prober::Send Fn() {
    return [this](hvd::v1::AgentMessage m) {
      std::lock_guard<std::mutex> lock(mu);
      reports.push_back(m.probe_report());
      cv.notify_all();
    };
  }
  hvd::v1::NetworkProbeReport Next(size_t index) {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(
        cv.wait_for(lock, std::chrono::seconds(10), [&] { return reports.size() > index; }));
    return reports.size() > index ? reports[index] : hvd::v1::NetworkProbeReport();
  }
};

hvd::v1::NetworkProbe Step(const std::string& id, hvd::v1::NetworkProbe::Step step,
                           int64_t timeout_ms) {
  hvd::v1::NetworkProbe p;
  p.set_probe_id(id);
  p.set_step(step);
  p.set_timeout_ms(timeout_ms);
  return p;
}

TEST(Prober, ListenDialDone) {
  Sink sink;
  Prober prober(sink.Fn(), [] { return std::string("me"); });
  prober.Handle(Step("job1", hvd::v1::NetworkProbe::LISTEN, 10000));
  const auto listening = sink.Next(0);
  EXPECT_EQ(listening.probe_id(), "job1");
  EXPECT_EQ(listening.step(), hvd::v1::NetworkProbe::LISTEN);
  EXPECT_EQ(listening.error(), "");
  ASSERT_GT(listening.port(), 0);

  auto dial = Step("job1", hvd::v1::NetworkProbe::DIAL, 2000);
  auto* t = dial.add_targets();
  t->set_candidate(3);
  t->set_address("127.0.0.1");
  t->set_port(listening.port());
  t->set_expect_agent("me");
  prober.Handle(dial);
  const auto dialed = sink.Next(1);
  EXPECT_EQ(dialed.step(), hvd::v1::NetworkProbe::DIAL);
  ASSERT_EQ(dialed.dials_size(), 1);
  EXPECT_EQ(dialed.dials(0).candidate(), 3);
  EXPECT_TRUE(dialed.dials(0).ok()) << dialed.dials(0).error();

  // DONE closes the listener: a later dial is refused.
  prober.Handle(Step("job1", hvd::v1::NetworkProbe::DONE, 0));
  bool refused = false;
  for (int i = 0; i < 100 && !refused; ++i) {
    const auto r = DialAll({{"127.0.0.1", listening.port(), "me"}}, "job1", milliseconds(500));
    refused = r[0].error == "connect: Connection refused";
    if (!refused) std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(refused);
}

TEST(Prober, ListenersCloseByThemselves) {
  Sink sink;
  Prober prober(sink.Fn(), [] { return std::string("me"); });
  prober.Handle(Step("job2", hvd::v1::NetworkProbe::LISTEN, 100));
  const int port = sink.Next(0).port();
  std::this_thread::sleep_for(milliseconds(400));
  const auto r = DialAll({{"127.0.0.1", port, "me"}}, "job2", milliseconds(500));
  EXPECT_EQ(r[0].error, "connect: Connection refused");
}

}  // namespace
}  // namespace hvd::agent
