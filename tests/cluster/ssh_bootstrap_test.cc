// hvdrun --ssh against real OpenSSH servers, one per namespace host (tests/cluster/test_sshd.h):
// no agent runs on the hosts; hvdrun starts them over SSH with a generated key and known_hosts,
// runs the job and stops them; with --ssh-tls-dir over mutual TLS (certificates from
// scripts/gen-certs.sh). And every way it can fail fails within seconds, naming the host and the
// step, leaving no agent behind. hvdrun runs with HOME in the test's directory, so the
// machine's ~/.ssh is never read.
#include <sys/stat.h>

#include "tests/cluster/cluster_fixture.h"
#include "tests/cluster/test_sshd.h"

namespace hvd::clustertest {
namespace {

using std::chrono::seconds;

class SshBootstrap : public NetnsTest {
 protected:
  void Start(int hosts) {
    struct stat st;
    for (const char* tool : {"/usr/sbin/sshd", "/usr/bin/ssh-keygen"}) {
      if (stat(tool, &st) != 0) {
        GTEST_SKIP() << "no " << tool
                     << " (install openssh-server and openssh-client: scripts/install-deps.sh)";
      }
    }
    HvdClusterOptions o;
    o.net.hosts = hosts;
    o.start_launcher = false;  // hvdrun --ssh brings its own
    o.start_agents = false;
    StartCluster(o);
    if (IsSkipped() || HasFatalFailure()) return;
    user_key_ = dir_ / "user_key";
    ASSERT_TRUE(GenerateKey(user_key_).ok());
    std::string known;
    for (int i = 0; i < hosts; ++i) {
      std::unique_ptr<TestSshd> d;
      Status s = TestSshd::Start(cluster_.get(), i, dir_.path(), user_key_ + ".pub", &d);
      ASSERT_TRUE(s.ok()) << s.message();
      known += d->known_hosts_line() + "\n";
      sshd_.push_back(std::move(d));
    }
    known_hosts_ = dir_ / "known_hosts";
    clitest::WriteFile(known_hosts_, known, 0600);
    // The agent by a path unique to this test, so its processes are found by command line.
    agent_ = dir_ / "hvd-agent";
    ASSERT_EQ(symlink(HVD_AGENT_PATH, agent_.c_str()), 0);
  }
  void TearDown() override {
    for (auto& d : sshd_) EXPECT_EQ(d->Stop(), "");
    EXPECT_EQ(RemoteAgents(), std::vector<std::string>{});
    NetnsTest::TearDown();
  }

  // hvdrun --ssh with the test's key, known_hosts and agent, in the launcher's namespace.
  clitest::ProcResult Run(const std::vector<std::string>& args,
                          const std::vector<std::string>& ssh_flags = {}) {
    std::vector<std::string> argv = {
        "/usr/bin/env", "HOME=" + dir_.path(),           HVDRUN_PATH,  "--ssh",
        "-p",           std::to_string(TestSshd::kPort), "--ssh-user", "root"};
    std::vector<std::string> defaults = {"-i",
                                         user_key_,
                                         "--ssh-known-hosts",
                                         known_hosts_,
                                         "--ssh-agent-path",
                                         agent_,
                                         "--ssh-timeout",
                                         "5"};
    // A flag given by the test replaces the default.
    for (size_t k = 0; k < defaults.size(); k += 2) {
      if (std::find(ssh_flags.begin(), ssh_flags.end(), defaults[k]) == ssh_flags.end()) {
        argv.push_back(defaults[k]);
        argv.push_back(defaults[k + 1]);
      }
    }
    argv.insert(argv.end(), ssh_flags.begin(), ssh_flags.end());
    argv.insert(argv.end(), args.begin(), args.end());
    return cluster_->Run(NetnsCluster::In(cluster_->net().launcher_ns(), argv), seconds(60));
  }
  std::string Hosts(int n) {
    std::string h;
    for (int i = 0; i < n; ++i) {
      if (i > 0) h += ",";
      h += cluster_->net().host_addr(i) + ":1";
    }
    return h;
  }
  // Live processes started as this test's agent (remote agents do not carry the marker: sshd
  // gives its sessions a clean environment).
  std::vector<std::string> RemoteAgents() {
    std::vector<std::string> left;
    if (agent_.empty()) return left;
    WaitUntil(
        [&] {
          left.clear();
          DIR* d = opendir("/proc");
          while (dirent* e = d != nullptr ? readdir(d) : nullptr) {
            if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
            std::string cmd = clitest::ReadAll(std::string("/proc/") + e->d_name + "/cmdline");
            if (cmd.rfind(agent_ + '\0', 0) == 0 && clitest::ProcessAlive(std::atoi(e->d_name))) {
              left.push_back(e->d_name);
            }
          }
          if (d != nullptr) closedir(d);
          return left.empty();
        },
        seconds(10));
    return left;
  }

  // scripts/gen-certs.sh --out DIR --hosts HOSTS, in the test's directory.
  std::string Certs(const std::string& name, const std::string& hosts) {
    const std::string out = dir_ / name;
    const std::string cmd = std::string(HVD_SOURCE_DIR) + "/scripts/gen-certs.sh --out " + out +
                            " --hosts " + hosts + " 2>/dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return out;
  }

  std::string user_key_, known_hosts_, agent_;
  std::vector<std::unique_ptr<TestSshd>> sshd_;
};

TEST_F(SshBootstrap, StartsAgentsOverSshRunsTheJobAndStopsThem) {
  Start(2);
  if (IsSkipped() || HasFatalFailure()) return;
  clitest::ProcResult r = Run({"-v", "-H", Hosts(2), EXAMPLE_TRAIN_PATH, "--steps", "100"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:trained on 2 ranks");
  EXPECT_HAS(r.err, "hvdrun: ssh root@10.77.0.11:2222: connected (ssh-ed25519 SHA256:");
  EXPECT_HAS(r.err, "hvdrun: ssh root@10.77.0.12:2222: connected (ssh-ed25519 SHA256:");
  EXPECT_HAS(r.err, "hvdrun: launcher for the ssh agents at 10.77.0.1:");
  EXPECT_HAS(r.err, "hvdrun: network: using eth0 (10.77.0.0/24) on all 2 hosts");
  EXPECT_HAS(r.err, "hvdrun: ssh root@10.77.0.11:2222: hvd-agent exited (0)");
  EXPECT_HAS(r.err, "hvdrun: ssh root@10.77.0.12:2222: hvd-agent exited (0)");
  EXPECT_EQ(RemoteAgents(), std::vector<std::string>{});
}

// --ssh-tls-dir: the launcher inside hvdrun serves TLS with DIR/10.77.0.1.crt (its address towards
// the hosts), each agent presents DIR/HOST.crt (and checks DIR/ca.crl); a job runs over it.
TEST_F(SshBootstrap, WithTlsDirTheAgentsAndTheLauncherUseMutualTls) {
  Start(2);
  if (IsSkipped() || HasFatalFailure()) return;
  const std::string certs = Certs("certs", "10.77.0.1,10.77.0.11,10.77.0.12");
  clitest::ProcResult r =
      Run({"-v", "-H", Hosts(2), EXAMPLE_TRAIN_PATH, "--steps", "100"}, {"--ssh-tls-dir", certs});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:trained on 2 ranks");
  EXPECT_HAS(r.err, "hvdrun: launcher for the ssh agents at 10.77.0.1:");
  EXPECT_HAS(r.err, " (TLS, agents' files in " + certs + ")");
  EXPECT_HAS(r.err, "hvdrun: ssh root@10.77.0.12:2222: hvd-agent exited (0)");
  EXPECT_EQ(RemoteAgents(), std::vector<std::string>{});
}

// A host whose files are missing: the agent's own message reaches the user, with where
// --ssh-tls-dir expects them; one for this machine missing is said before any host is contacted.
TEST_F(SshBootstrap, WithTlsDirMissingFilesAreNamed) {
  Start(2);
  if (IsSkipped() || HasFatalFailure()) return;
  const std::string certs = Certs("certs", "10.77.0.1,10.77.0.11");
  clitest::ProcResult r = Run({"-H", Hosts(2), "/bin/true"}, {"--ssh-tls-dir", certs});
  EXPECT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.seconds, 15) << r.err;
  EXPECT_HAS(r.err, "hvdrun: ssh root@10.77.0.12:2222: hvd-agent exited with code 2");
  EXPECT_HAS(r.err, "hvd-agent: --tls-cert " + certs + "/10.77.0.12.crt");
  EXPECT_HAS(r.err, "(--ssh-tls-dir: that host needs " + certs + "/10.77.0.12.crt, " + certs +
                        "/10.77.0.12.key and " + certs + "/ca.crt");
  EXPECT_EQ(RemoteAgents(), std::vector<std::string>{});
  const std::string other = Certs("other", "10.77.0.11");
  r = Run({"-H", Hosts(1), "/bin/true"}, {"--ssh-tls-dir", other, "-v"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_HAS(r.err, "--ssh-tls-dir " + other +
                        ": no certificate for the launcher on this machine "
                        "(looked for " +
                        other + "/10.77.0.1.crt");
  EXPECT_EQ(r.err.find("connected"), std::string::npos) << r.err;  // no host contacted
}

TEST_F(SshBootstrap, EachFailureNamesTheHostAndTheStepWithinSeconds) {
  Start(2);
  if (IsSkipped() || HasFatalFailure()) return;
  auto fails = [&](const std::vector<std::string>& ssh_flags, const std::string& says,
                   int hosts = 1) {
    clitest::ProcResult r = Run({"-H", Hosts(hosts), "/bin/true"}, ssh_flags);
    EXPECT_FALSE(r.timed_out) << r.err;
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_LT(r.seconds, 15) << r.err;
    EXPECT_HAS(r.err, says);
    EXPECT_EQ(RemoteAgents(), std::vector<std::string>{}) << "after: " << says;
    return r.err;
  };
  // Nothing listens on that port.
  fails({"-p", "2299"}, "hvdrun: ssh root@10.77.0.11:2299: connect: ");
  // The host key is not known...
  const std::string empty = dir_ / "empty_known_hosts";
  clitest::WriteFile(empty, "", 0600);
  std::string err = fails({"--ssh-known-hosts", empty},
                          "hvdrun: ssh root@10.77.0.11:2222: host key: [10.77.0.11]:2222 is not "
                          "in " +
                              empty + " (the server shows ssh-ed25519 SHA256:");
  EXPECT_HAS(err, "ssh-keyscan -p 2222 10.77.0.11 >> " + empty);
  // ...or another key is recorded for it.
  const std::string other = dir_ / "other_key";
  ASSERT_TRUE(GenerateKey(other).ok());
  std::string other_pub;
  ASSERT_TRUE(PublicKey(other + ".pub", &other_pub).ok());
  const std::string changed = dir_ / "changed_known_hosts";
  clitest::WriteFile(changed, "[10.77.0.11]:2222 " + other_pub + "\n", 0600);
  err = fails({"--ssh-known-hosts", changed},
              "hvdrun: ssh root@10.77.0.11:2222: host key: the server now shows ssh-ed25519 "
              "SHA256:");
  EXPECT_HAS(err, "which is NOT the key " + changed + " records for [10.77.0.11]:2222");
  // A key the hosts do not accept.
  fails({"-i", other}, "hvdrun: ssh root@10.77.0.11:2222: authenticate: the server refused " +
                           other + " for user root");
  // hvd-agent is not installed there.
  err = fails({"--ssh-agent-path", "/nonexistent/hvd-agent"},
              "hvdrun: ssh root@10.77.0.11:2222: hvd-agent was not found there (exit 127");
  EXPECT_HAS(err, "pass --ssh-agent-path");
  // One host fine, the other refused: the agent already started on the first is stopped.
  const std::string half = dir_ / "half_known_hosts";
  clitest::WriteFile(half, sshd_[0]->known_hosts_line() + "\n", 0600);
  fails({"--ssh-known-hosts", half},
        "hvdrun: ssh root@10.77.0.12:2222: host key: [10.77.0.12]:2222 is not in", 2);
}

TEST_F(SshBootstrap, BadFlagCombinationsAreUsageErrors) {
  Start(1);
  if (IsSkipped() || HasFatalFailure()) return;
  clitest::ProcResult r =
      cluster_->Run(NetnsCluster::In(cluster_->net().launcher_ns(),
                                     {HVDRUN_PATH, "--ssh", "-np", "1", "/bin/true"}),
                    seconds(10));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "--ssh needs the hosts to start agents on");
  r = cluster_->Run(NetnsCluster::In(cluster_->net().launcher_ns(),
                                     {HVDRUN_PATH, "-p", "22", "-np", "1", "/bin/true"}),
                    seconds(10));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "-p needs --ssh: add --ssh");
}

}  // namespace
}  // namespace hvd::clustertest
