// The namespace cluster itself: three hosts that reach each other and the launcher, and a 3-host
// job of the example trainer through the real hvdrun, hvd-launcherd and hvd-agents.
#include "tests/cluster/cluster_fixture.h"

namespace hvd::clustertest {
namespace {

using std::chrono::seconds;

TEST_F(NetnsTest, ThreeHostsTrainTogether) {
  HvdClusterOptions o;
  o.net.hosts = 3;
  o.slots = 1;
  StartCluster(o);
  if (IsSkipped()) return;
  // Each agent advertises its own host's address: the one it reaches the launcher from.
  nlohmann::json agents;
  ASSERT_TRUE(cluster_->GetJson("/v1/agents", &agents).ok());
  std::set<std::string> addrs;
  for (const nlohmann::json& a : agents["agents"])
    addrs.insert(a["advertise_addr"].get<std::string>());
  EXPECT_EQ(addrs, (std::set<std::string>{"10.77.0.11", "10.77.0.12", "10.77.0.13"}))
      << agents.dump(2);

  clitest::ProcResult r = cluster_->Run(cluster_->Hvdrun("", {"-H", "host-a:1,host-b:1,host-c:1",
                                                              EXAMPLE_TRAIN_PATH, "--steps", "30"}),
                                        seconds(60));
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:trained on 3 ranks");
  const nlohmann::json job = WaitJob(LastJobId(), [](const nlohmann::json& j) {
    return j["state"] == "SUCCEEDED" && j["ranks"].size() == 3;
  });
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(job["ranks"][i]["host"], std::string("host-") + static_cast<char>('a' + i));
    EXPECT_EQ(job["ranks"][i]["cross_size"], 3);
  }
}

}  // namespace
}  // namespace hvd::clustertest
