// hvdrun against a cluster (--launcher): attached runs, submit, status, list, logs, cancel and
// agents, as real hvdrun processes talking to a Launcher and an Agent hosted by this test
// (the embedded pair, on 127.0.0.1, with 2 slots). Every test proves that no process survives.
#include <gtest/gtest.h>

#include "testutil/expect.h"

#include "cli/embedded.h"
#include "hvdrun_process.h"
#include "test_cluster.h"

#ifndef HVDRUN_PATH
#error "HVDRUN_PATH must name the built hvdrun (tests/CMakeLists.txt)"
#endif

namespace hvd::clitest {
namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

class HvdrunCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    Status s = StartTestCluster(2, HVD_AGENT_PATH, dir_ / "token", &cluster_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void TearDown() override {
    if (cluster_) cluster_->Stop();
    EXPECT_EQ(Leftovers(), std::vector<std::string>{});
  }
  std::vector<std::string> Args(const std::vector<std::string>& args) {
    std::vector<std::string> a = {HVDRUN_PATH};
    a.insert(a.end(), args.begin(), args.end());
    return a;
  }
  std::vector<std::string> Env() {
    return {"HVD_LAUNCHER=" + cluster_->address(), "HVD_TOKEN_FILE=" + (dir_ / "token")};
  }
  ProcResult Hvdrun(const std::vector<std::string>& args) {
    return RunProcess(Args(args), dir_.path(), kTimeout, Env(), dir_.path());
  }
  // `hvdrun submit ...`: the job id.
  std::string Submit(const std::vector<std::string>& args) {
    std::vector<std::string> a = {"submit"};
    a.insert(a.end(), args.begin(), args.end());
    ProcResult r = Hvdrun(a);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string id = r.out;
    while (!id.empty() && id.back() == '\n') id.pop_back();
    EXPECT_FALSE(id.empty());
    EXPECT_EQ(id.find('\n'), std::string::npos) << "submit prints only the id: " << r.out;
    return id;
  }

  TempDir dir_;
  std::unique_ptr<cli::EmbeddedCluster> cluster_;
};

TEST_F(HvdrunCluster, AttachedRun) {
  ProcResult r = Hvdrun({"-np", "2", "/bin/sh", "-c", "echo hi from $HVD_RANK"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:hi from 0\n");
  EXPECT_HAS(r.out, "[1]<stdout>:hi from 1\n");
  r = Hvdrun({"-np", "2", "/bin/sh", "-c", "exit $((HVD_RANK * 4))"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_HAS(r.err, "rank 1");
}

TEST_F(HvdrunCluster, ExplicitFlagsOverrideTheEnvironment) {
  ProcResult r = RunProcess(Args({"-np", "1", "--launcher", cluster_->address(), "--token-file",
                                  dir_ / "token", "/bin/echo", "ok"}),
                            dir_.path(), kTimeout, {"HVD_LAUNCHER=127.0.0.1:1"}, dir_.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:ok");
}

TEST_F(HvdrunCluster, WrongTokenIsRefusedAndNamed) {
  WriteFile(dir_ / "wrong", "not-the-token\n", 0600);
  ProcResult r = RunProcess(Args({"list", "--token-file", dir_ / "wrong"}), dir_.path(), kTimeout,
                            Env(), dir_.path());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_HAS(r.err, "hvdrun: launcher at " + cluster_->address() + ": ListJobs");
  EXPECT_HAS(r.err, "token");
}

TEST_F(HvdrunCluster, SubmitStatusLogsList) {
  // Rank 1 fails after a pause: its failure ends the job, and rank 0's line must be out first
  // (without the pause rank 0 was sometimes stopped before its echo: 1 run in 15).
  const std::string id = Submit({"-np", "2", "--name", "greeter", "/bin/sh", "-c",
                                 "echo line $HVD_RANK; echo oops $HVD_RANK >&2; "
                                 "if [ $HVD_RANK = 1 ]; then sleep 1; fi; exit $HVD_RANK"});
  // logs -f follows to the end and exits like the job: rank 1 exited 1.
  ProcResult r = Hvdrun({"logs", "-f", id});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:line 0\n");
  EXPECT_HAS(r.err, "[1]<stderr>:oops 1\n");
  EXPECT_HAS(r.err, "rank 1");
  // Without -f: the output so far, then exit 0.
  r = Hvdrun({"logs", id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[1]<stdout>:line 1\n");
  r = Hvdrun({"status", id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "job:       " + id + " (greeter)\n");
  EXPECT_HAS(r.out, "state:     FAILED, exit code 1\n");
  EXPECT_HAS(r.out, "(detached)");
  EXPECT_HAS(r.out, "RANK  HOST");
  r = Hvdrun({"status", id, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "\"id\": \"" + id + "\"");  // REST's shape (control/status_json.h)
  r = Hvdrun({"list"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "ID");
  EXPECT_HAS(r.out, id);
  EXPECT_HAS(r.out, "greeter");
  r = Hvdrun({"status"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "agents:   1 ready of 1\n");
  EXPECT_HAS(r.out, "1 FAILED");
  r = Hvdrun({"status", "no-such-job"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.err, "no-such-job");
}

TEST_F(HvdrunCluster, Agents) {
  ProcResult r = Hvdrun({"agents"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "AGENT");
  EXPECT_HAS(r.out, "READY");
  EXPECT_HAS(r.out, "0/2");
  r = Hvdrun({"agents", "--json"});
  EXPECT_HAS(r.out, "\"slots\": 2");
}

TEST_F(HvdrunCluster, CancelEndsADetachedJobAndItsRanks) {
  const std::string id =
      Submit({"-np", "2", "/bin/sh", "-c", "echo $$ > pid.$HVD_RANK; exec sleep 100"});
  std::vector<pid_t> pids;
  for (int rank : {0, 1}) {
    pid_t pid = 0;
    for (int i = 0; i < 3000 && pid == 0; ++i) {  // bounded: 30 s
      const std::string s = ReadAll(dir_ / ("pid." + std::to_string(rank)));
      if (!s.empty() && s.back() == '\n') pid = std::atoi(s.c_str());
      if (pid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_GT(pid, 0) << "rank " << rank << " never started";
    pids.push_back(pid);
  }
  ProcResult r = Hvdrun({"cancel", id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "job " + id + ": CANCELLED");
  r = Hvdrun({"logs", "-f", id});  // returns once the job is over
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_HAS(r.err, "was cancelled");
  for (int i = 0; i < 500 && (ProcessAlive(pids[0]) || ProcessAlive(pids[1])); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (pid_t pid : pids) EXPECT_FALSE(ProcessAlive(pid)) << pid;
}

TEST_F(HvdrunCluster, WaitingJobSaysWhyAndSigintCancelsIt) {
  // Both slots busy: the attached run waits, says why, and Ctrl-C cancels it cleanly.
  const std::string busy = Submit({"-np", "2", "/bin/sleep", "100"});
  Proc p(Args({"-np", "1", "/bin/true"}), dir_.path(), Env(), dir_.path());
  bool said = false;
  for (int i = 0; i < 1000 && !said; ++i) {  // bounded: 10 s
    said = p.Err().find(" is waiting for ") != std::string::npos;
    if (!said) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(said) << p.Err();
  kill(-p.pid(), SIGINT);
  ProcResult r = p.Wait(std::chrono::seconds(20));
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_HAS(r.err, "cancelling job");
  r = Hvdrun({"cancel", busy});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = Hvdrun({"logs", "-f", busy});
  EXPECT_EQ(r.exit_code, 130) << r.err;
}

TEST_F(HvdrunCluster, SigintCancelsAnAttachedClusterRun) {
  Proc p(Args({"-np", "2", "/bin/sh", "-c", "echo $$ > pid.$HVD_RANK; exec sleep 100"}),
         dir_.path(), Env(), dir_.path());
  pid_t pid = 0;
  for (int i = 0; i < 3000 && pid == 0; ++i) {
    const std::string s = ReadAll(dir_ / "pid.1");
    if (!s.empty() && s.back() == '\n') pid = std::atoi(s.c_str());
    if (pid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(pid, 0) << p.Err();
  p.Signal(SIGINT);
  ProcResult r = p.Wait(std::chrono::seconds(20));
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  // hvdrun left only once the launcher reported the ranks gone.
  EXPECT_FALSE(ProcessAlive(pid));
  ProcResult list = Hvdrun({"list"});
  EXPECT_HAS(list.out, "CANCELLED");
}

// Cluster ranks start under the agent (here, in this test's process, whose environment lacks
// HVDRUN_FWD_*): they get hvdrun's environment as local ranks do, less the deny list
// (cli/forward_env.h), with -x winning; submit forwards it too.
TEST_F(HvdrunCluster, ForwardsTheEnvironmentLikeLocalMode) {
  ASSERT_EQ(std::getenv("HVDRUN_FWD_A"), nullptr);
  std::vector<std::string> env = Env();
  env.insert(env.end(), {"HVDRUN_FWD_A=from hvdrun", "HVDRUN_FWD_B=shell", "HOSTNAME=not-here",
                         "SSH_CONNECTION=1.2.3.4 5 6.7.8.9 22"});
  const std::string show =
      "echo \"$HVD_RANK:$HVDRUN_FWD_A:$HVDRUN_FWD_B:${HOSTNAME-}:${SSH_CONNECTION-}:"
      "${HVD_LAUNCHER-}\"";
  ProcResult r = RunProcess(Args({"-np", "2", "-x", "HVDRUN_FWD_B=flag", "/bin/sh", "-c", show}),
                            dir_.path(), kTimeout, env, dir_.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:0:from hvdrun:flag:");
  EXPECT_HAS(r.out, "[1]<stdout>:1:from hvdrun:flag:");
  EXPECT_EQ(r.out.find("not-here"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("1.2.3.4"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(cluster_->address()), std::string::npos) << r.out;
  r = RunProcess(Args({"submit", "-np", "1", "/bin/sh", "-c", show}), dir_.path(), kTimeout, env,
                 dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  r = Hvdrun({"logs", "-f", id});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:0:from hvdrun:shell:");
}

}  // namespace
}  // namespace hvd::clitest
