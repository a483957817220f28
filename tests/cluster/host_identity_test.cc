// Issue 20, finding 12, on real network namespaces of one machine (they share the UTS namespace,
// so gethostname() is the same in all of them, as for containers that kept the node's name):
//   - two agents started without --host claim the same host name: the launcher takes the first
//     and refuses the second, whose log says to set --host;
//   - two ranks that claim the same HVD_HOSTNAME from different namespaces cannot share memory:
//     they notice at the handshake (boot id and namespaces differ), use TCP and the job trains.
#include <unistd.h>

#include "tests/cluster/cluster_fixture.h"

namespace hvd::clustertest {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_F(NetnsTest, SecondAgentWithTheSameHostNameIsRefusedNamingTheFlag) {
  HvdClusterOptions o;
  o.net.hosts = 2;
  o.start_agents = false;
  StartCluster(o);
  if (IsSkipped()) return;
  // No --host: both default to this machine's name.
  auto agent = [&](int i) {
    return cluster_->StartIn(cluster_->net().host_ns(i),
                             {HVD_AGENT_PATH, "--launcher", cluster_->launcher(), "--token-file",
                              cluster_->token_file(), "--slots", "1"});
  };
  auto first = agent(0);
  ASSERT_TRUE(WaitUntil(
      [&] {
        nlohmann::json agents;
        return cluster_->GetJson("/v1/agents", &agents).ok() && agents["agents"].size() == 1 &&
               agents["agents"][0]["state"] == "READY";
      },
      seconds(10)))
      << first->Err();
  auto second = agent(1);
  ASSERT_TRUE(
      WaitUntil([&] { return second->Err().find("--host") != std::string::npos; }, seconds(10)))
      << "the second agent's stderr: " << second->Err();
  EXPECT_HAS(second->Err(), "cannot register with the launcher");
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  EXPECT_HAS(second->Err(), std::string("as host '") + name + "'");
  nlohmann::json agents;
  ASSERT_TRUE(cluster_->GetJson("/v1/agents", &agents).ok());
  EXPECT_EQ(agents["agents"].size(), 1u) << agents.dump(2);

  for (auto* p : {first.get(), second.get()}) {
    p->Signal(SIGTERM);
    clitest::ProcResult r = p->Wait(seconds(10));
    EXPECT_FALSE(r.timed_out) << r.err;
  }
}

TEST_F(NetnsTest, SameHostNameInTwoNamespacesFallsBackToTcp) {
  HvdClusterOptions o;
  o.net.hosts = 2;
  o.start_agents = false;
  o.start_launcher = false;
  StartCluster(o);
  if (IsSkipped()) return;
  const std::string rdzv = dir_.path() + "/rdzv";
  std::vector<std::unique_ptr<clitest::Proc>> ranks;
  for (int i = 0; i < 2; ++i) {
    ranks.push_back(cluster_->StartIn(
        cluster_->net().host_ns(i),
        {"env", "HVD_RANK=" + std::to_string(i), "HVD_SIZE=2", "HVD_RENDEZVOUS=file://" + rdzv,
         "HVD_HOSTNAME=one-name", "HVD_ADVERTISE_ADDR=" + cluster_->net().host_addr(i),
         "HVD_START_TIMEOUT_SECONDS=20", "HVD_TEST_SHM_IDENTITY=", EXAMPLE_TRAIN_PATH, "--steps",
         "60"}));
  }
  for (int i = 0; i < 2; ++i) {
    clitest::ProcResult r = ranks[i]->Wait(seconds(40));
    ASSERT_FALSE(r.timed_out) << "rank " << i << ": " << r.err;
    EXPECT_EQ(r.exit_code, 0) << "rank " << i << ": " << r.err;
    EXPECT_HAS(r.err, "they talk over TCP, not shared memory");
  }
  EXPECT_HAS(ranks[0]->Out(), "trained on 2 ranks");
}

}  // namespace
}  // namespace hvd::clustertest
