// The network check between a job's hosts, on namespace hosts that have a routable eth0 and a
// decoy0 that exists everywhere but routes nowhere (like docker0): the job uses eth0 and its
// traffic goes there; a broken route fails the job at once naming the pair; --network-interface
// overrides; and a host whose agent dies fails the job with that cause.
#include "tests/cluster/cluster_fixture.h"

namespace hvd::clustertest {
namespace {

using std::chrono::seconds;

const std::vector<std::string> kEnvPrinter = {
    "/bin/sh", "-c", "echo $HVD_ADVERTISE_ADDR $HVD_IFACE $NCCL_SOCKET_IFNAME"};

class NetworkChoice : public NetnsTest {
 protected:
  void Start(int hosts, const std::vector<std::string>& launcher_flags = {}) {
    HvdClusterOptions o;
    o.net.hosts = hosts;
    o.net.decoy = true;
    o.slots = 1;
    o.launcher_flags = launcher_flags;
    StartCluster(o);
  }
  std::string Hosts(int n) {
    std::string h;
    for (int i = 0; i < n; ++i) {
      h += (i ? std::string(",") : std::string()) + cluster_->net().host_name(i) + ":1";
    }
    return h;
  }
  clitest::ProcResult Hvdrun(const std::vector<std::string>& args, int timeout_s = 60) {
    return cluster_->Run(cluster_->Hvdrun("", args), seconds(timeout_s));
  }
  // Bytes sent by `dev` on every host.
  std::vector<int64_t> TxBytes(const std::string& dev) {
    std::vector<int64_t> tx;
    for (int i = 0; i < cluster_->net().hosts(); ++i) {
      int64_t t = 0, r = 0;
      Status s = NetnsCluster::DeviceBytes(cluster_->net().host_ns(i), dev, &t, &r);
      EXPECT_TRUE(s.ok()) << s.message();
      tx.push_back(t);
    }
    return tx;
  }
};

TEST_F(NetworkChoice, ThreeHostsTrainOverTheRoutableInterfaceWhileTheDecoyExists) {
  Start(3);
  if (IsSkipped()) return;
  const std::vector<int64_t> eth0_before = TxBytes("eth0"), decoy_before = TxBytes("decoy0");
  // The example MLP: 27 KB of gradients per step, 128 steps: enough to see on the counters.
  clitest::ProcResult r = Hvdrun({"-v", "-H", Hosts(3), MLP_TRAIN_PATH, "--epochs", "2"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:mlp_train: 3 ranks");
  EXPECT_HAS(r.err,
             "hvdrun: network: using eth0 (10.77.0.0/24) on all 3 hosts; skipped decoy0: host-a "
             "could not reach host-b at 172.31.0.12 (no answer within 500 ms");
  const std::vector<int64_t> eth0_after = TxBytes("eth0"), decoy_after = TxBytes("decoy0");
  for (int i = 0; i < 3; ++i) {
    // The ring's traffic went over eth0; the decoy saw at most the probe's unanswered attempts.
    EXPECT_GT(eth0_after[i] - eth0_before[i], 2 << 20) << cluster_->net().host_name(i);
    EXPECT_LT(decoy_after[i] - decoy_before[i], 16 << 10) << cluster_->net().host_name(i);
  }

  // The record: chosen network, per-host addresses, every dial.
  nlohmann::json job =
      WaitJob(LastJobId(), [](const nlohmann::json& j) { return j["state"] == "SUCCEEDED"; });
  const nlohmann::json& net = job["network"];
  ASSERT_TRUE(net.is_object()) << job.dump(2);
  EXPECT_EQ(net["ok"], true);
  EXPECT_EQ(net["chosen"], "eth0");
  ASSERT_EQ(net["hosts"].size(), 3u) << net.dump(2);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(net["hosts"][i]["host"], cluster_->net().host_name(i));
    EXPECT_EQ(net["hosts"][i]["iface"], "eth0");
    EXPECT_EQ(net["hosts"][i]["address"], cluster_->net().host_addr(i));
  }
  ASSERT_EQ(net["dials"].size(), 6u) << net.dump(2);  // 3 ring pairs x 2 candidate networks
  for (const nlohmann::json& d : net["dials"]) EXPECT_EQ(d["ok"], d["network"] == "eth0");

  // What every rank is told: the chosen address and interface, for hvd and for NCCL.
  r = Hvdrun({"-H", Hosts(3), kEnvPrinter[0], kEnvPrinter[1], kEnvPrinter[2]});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (int i = 0; i < 3; ++i) {
    EXPECT_HAS(r.out, "[" + std::to_string(i) + "]<stdout>:" + cluster_->net().host_addr(i) +
                          " eth0 =eth0\n");
  }
}

TEST_F(NetworkChoice, ABrokenRouteFailsTheJobAtOnceNamingThePair) {
  Start(3);
  if (IsSkipped()) return;
  // host-b cannot reach host-c's eth0 (packets dropped); both still reach the launcher.
  ASSERT_TRUE(cluster_->net().BreakRoute(1, 2).ok());
  clitest::ProcResult r = Hvdrun({"-H", Hosts(3), EXAMPLE_TRAIN_PATH}, 30);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.seconds, 10) << r.err;
  EXPECT_HAS(r.err,
             "network check failed: no network works between all 3 hosts: eth0: host-b could not "
             "reach host-c at 10.77.0.13 (no answer within 500 ms");
  EXPECT_HAS(r.err, "decoy0: host-a could not reach host-b at 172.31.0.12");
  EXPECT_EQ(r.out, "");  // no rank ran
  nlohmann::json job;
  ASSERT_TRUE(cluster_->GetJson("/v1/jobs/" + LastJobId(), &job).ok());
  EXPECT_EQ(job["state"], "FAILED") << job.dump(2);
  EXPECT_EQ(job["ranks"].size(), 0u) << job.dump(2);
  EXPECT_EQ(job["network"]["ok"], false);
  EXPECT_HAS(job["failure"]["message"].get<std::string>(), "host-b could not reach host-c");
  int failed = 0;
  for (const nlohmann::json& d : job["network"]["dials"]) failed += d["ok"] == false;
  EXPECT_EQ(failed, 4) << job.dump(2);  // b->c on eth0, and the three decoy dials
}

TEST_F(NetworkChoice, NetworkInterfaceOverridesAndBadNamesFailAtOnce) {
  Start(2);
  if (IsSkipped()) return;
  // A subnet: each host's address in it.
  clitest::ProcResult r = Hvdrun({"-v", "--network-interface", "10.77.0.0/16", "-H", Hosts(2),
                                  kEnvPrinter[0], kEnvPrinter[1], kEnvPrinter[2]});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.err, "hvdrun: network: using 10.77.0.0/16 (10.77.0.0/24) on all 2 hosts\n");
  EXPECT_HAS(r.out, "[1]<stdout>:10.77.0.12 eth0 =eth0\n");
  // The decoy on purpose (HVD_IFACE in hvdrun's environment): it does not route, so the job fails
  // naming the pair instead of hanging.
  std::vector<std::string> argv = cluster_->Hvdrun("", {"-H", Hosts(2), "/bin/true"});
  argv.insert(argv.begin() + 4, {"/usr/bin/env", "HVD_IFACE=decoy0"});
  r = cluster_->Run(argv, seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_HAS(r.err,
             "no network works between all 2 hosts: decoy0: host-a could not reach host-b "
             "at 172.31.0.12");
  // A name no host has: refused before any probe, with what the hosts have.
  r = Hvdrun({"--network-interface", "eth9", "-H", Hosts(2), "/bin/true"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_HAS(r.err, "eth9: host-a has no up interface eth9");
  EXPECT_HAS(r.err, "host-b: lo 127.0.0.1/8, eth0 10.77.0.12/24, decoy0 172.31.0.12/24");
  // A malformed subnet never leaves hvdrun.
  r = Hvdrun({"--network-interface", "10.0.0.0/40", "-H", Hosts(2), "/bin/true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "--network-interface: '10.0.0.0/40' is not an IPv4 subnet");
}

TEST_F(NetworkChoice, AHostWhoseAgentIsKilledFailsTheJobWithItsCause) {
  Start(3, {"--lease-ms", "2000"});
  if (IsSkipped()) return;
  std::unique_ptr<clitest::Proc> run =
      cluster_->StartIn(cluster_->net().launcher_ns(),
                        {HVDRUN_PATH, "--launcher", cluster_->launcher(), "--token-file",
                         cluster_->token_file(), "-H", Hosts(3), "/bin/sh", "-c", "exec sleep 60"});
  std::string id;
  ASSERT_TRUE(WaitUntil([&] { return !(id = LastJobId()).empty(); }, seconds(10)));
  nlohmann::json job = WaitJob(id, [](const nlohmann::json& j) { return j["state"] == "RUNNING"; });
  ASSERT_EQ(job["state"], "RUNNING") << job.dump(2);
  cluster_->KillAgent(2);  // SIGKILL: its rank dies with it (PDEATHSIG); nobody says goodbye
  clitest::ProcResult r = run->Wait(seconds(30));
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.seconds, 20) << r.err;
  EXPECT_HAS(r.err, "failed: agent on host-c lost");
  EXPECT_HAS(r.err, "rank 2 ran there");
  job = WaitJob(id, [](const nlohmann::json& j) {
    for (const nlohmann::json& rank : j["ranks"]) {
      if (rank["state"] == "RUNNING" || rank["state"] == "STARTING") return false;
    }
    return true;
  });
  EXPECT_EQ(job["failure"]["host"], "host-c") << job.dump(2);
}

}  // namespace
}  // namespace hvd::clustertest
