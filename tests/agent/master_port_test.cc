#include "agent/master_port.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>

namespace hvd::agent {
namespace {

TEST(MasterPortTest, ParsesTheKernelsRange) {
  PortRange r;
  ASSERT_TRUE(ParsePortRange("32768\t60999\n", &r).ok());
  EXPECT_EQ(r.lo, 32768);
  EXPECT_EQ(r.hi, 60999);
  for (const char* bad : {"", "32768", "a b", "0 100", "100 70000", "60999 32768"}) {
    EXPECT_FALSE(ParsePortRange(bad, &r).ok()) << bad;
  }
}

TEST(MasterPortTest, DrawsBelowTheEphemeralRangeOrAboveIt) {
  PortRange r = MasterPortRange({32768, 60999});  // Linux's default
  EXPECT_EQ(r.lo, 20000);
  EXPECT_EQ(r.hi, 32767);
  r = MasterPortRange({10000, 60000});  // nothing below 20000 left: above it
  EXPECT_EQ(r.lo, 60001);
  EXPECT_EQ(r.hi, 65535);
  EXPECT_EQ(MasterPortRange({1024, 65000}).size(), 0);  // no room: the kernel picks
}

class Picker : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/master_port_test.XXXXXX";
    ASSERT_NE(mkstemp(tmpl), -1);
    range_file_ = tmpl;
    std::ofstream(range_file_) << "21000 60999\n";  // draws from 20000-20999
  }
  void TearDown() override { unlink(range_file_.c_str()); }
  std::string range_file_;
};

TEST_F(Picker, SkipsBusyPortsAndNeverRepeatsOne) {
  std::set<int> tried;
  // Only 20100-20103 are free.
  MasterPortPicker picker(
      [&](int port, int* bound) {
        tried.insert(port);
        *bound = port;
        return port >= 20100 && port <= 20103;
      },
      range_file_);
  std::set<int> given;
  for (int i = 0; i < 4; ++i) {
    int port = 0;
    Status s;
    // Random draws: a few rounds may miss the four free ports; each round is 64 draws.
    for (int round = 0; round < 200 && port == 0; ++round) s = picker.Pick(&port);
    ASSERT_GT(port, 0) << s.message();
    EXPECT_TRUE(given.insert(port).second) << port << " given twice";
  }
  EXPECT_EQ(given, (std::set<int>{20100, 20101, 20102, 20103}));
  for (int port : tried) {
    EXPECT_GE(port, 20000);
    EXPECT_LE(port, 20999);
  }
  int port = 0;
  Status s = picker.Pick(&port);  // all four given out already
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("20000-20999"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("-x MASTER_PORT=N"), std::string::npos) << s.message();
}

TEST_F(Picker, AnswerEchoesTheRequestWithThePortOrTheError) {
  MasterPortPicker picker(
      [](int port, int* bound) {
        *bound = port;
        return true;
      },
      range_file_);
  hvd::v1::MasterPortRequest req;
  req.set_request_id("r1");
  req.set_job_id("j1");
  hvd::v1::AgentMessage m = picker.Answer(req);
  ASSERT_TRUE(m.has_master_port());
  EXPECT_EQ(m.master_port().request_id(), "r1");
  EXPECT_GE(m.master_port().port(), 20000);
  EXPECT_TRUE(m.master_port().error().empty());

  MasterPortPicker busy([](int, int*) { return false; }, range_file_);
  m = busy.Answer(req);
  EXPECT_EQ(m.master_port().port(), 0);
  EXPECT_NE(m.master_port().error().find("no free TCP port"), std::string::npos);
}

TEST(MasterPortTest, RealBindCheckSeesAListener) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  EXPECT_FALSE(PortBindable(port));
  close(fd);
  EXPECT_TRUE(PortBindable(port));  // SO_REUSEADDR, as torch's store binds

  // The real picker: a port outside the kernel's ephemeral range that is free now.
  MasterPortPicker picker;
  int chosen = 0;
  ASSERT_TRUE(picker.Pick(&chosen).ok());
  EXPECT_GT(chosen, 0);
  EXPECT_TRUE(PortBindable(chosen));
}

}  // namespace
}  // namespace hvd::agent
