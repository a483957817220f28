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

TEST_F(NetnsTest, AgentsReportTheirInterfacesAndAdvertiseTheRouteNotTheDecoy) {
  HvdClusterOptions o;
  o.net.hosts = 2;
  o.net.decoy = true;
  o.slots = 1;
  StartCluster(o);
  if (IsSkipped()) return;
  nlohmann::json agents;
  ASSERT_TRUE(cluster_->GetJson("/v1/agents", &agents).ok());
  ASSERT_EQ(agents["agents"].size(), 2u) << agents.dump(2);
  for (const nlohmann::json& a : agents["agents"]) {
    const int i = a["host"] == "host-a" ? 0 : 1;
    EXPECT_EQ(a["advertise_addr"], cluster_->net().host_addr(i)) << a.dump(2);
    EXPECT_EQ(a["advertise_iface"], "eth0") << a.dump(2);
    std::map<std::string, std::string> addr_of;
    for (const nlohmann::json& x : a["interfaces"]) addr_of[x["name"]] = x["address"];
    EXPECT_EQ(addr_of["decoy0"], cluster_->net().decoy_addr(i)) << a.dump(2);
    EXPECT_EQ(addr_of["eth0"], cluster_->net().host_addr(i)) << a.dump(2);
    EXPECT_EQ(addr_of["lo"], "127.0.0.1") << a.dump(2);
  }

  // An agent told to use an interface its host lacks stops at once and says what the host has.
  clitest::ProcResult r =
      cluster_->Run(NetnsCluster::In(cluster_->net().host_ns(0),
                                     {HVD_AGENT_PATH, "--launcher", cluster_->launcher(),
                                      "--token-file", cluster_->token_file(), "--host", "host-a2",
                                      "--network-interface", "eth9"}),
                    seconds(10));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "--network-interface: host-a2 has no interface eth9");
  EXPECT_HAS(r.err, "eth0 10.77.0.11/24");
  EXPECT_HAS(r.err, "decoy0 172.31.0.11/24");
}

}  // namespace
}  // namespace hvd::clustertest
