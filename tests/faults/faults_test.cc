// Fault injection against real processes: a real hvd-launcherd and two hvd-agents (node-a,
// node-b, 2 slots each, --state-dir each) on 127.0.0.1, jobs of real hvd ranks (fault_worker)
// started through the real hvdrun. Each scenario injects one fault (kill -9 a rank, a rank's
// child, an agent, the launcher, hvdrun; SIGSTOP a rank; a binary that does not exist; a rank
// that exits 3; a rank that never reaches the rendezvous) and asserts the job's final state and
// cause, hvdrun's exit code, how long the teardown took, and that no process of the job remains
// (the harness scans /proc for the test's marker after every test).
//
// Times are printed ("[ timing   ] ...") and bounded generously: the bounds catch a hang, the
// figures themselves are measured by tests/faults/chaos.py and recorded in docs/reliability.md.
#include <regex>

#include "tests/integration/cluster_harness.h"

#ifndef FAULT_WORKER_PATH
#error "tests/CMakeLists.txt must define FAULT_WORKER_PATH"
#endif

namespace hvd::integrationtest {
namespace {

constexpr const char* kLeaseMs = "2000";
// A detection and teardown that takes longer than this is a bug, not noise.
constexpr auto kTeardownBound = seconds(5);

class Faults : public ClusterHarness {
 protected:
  Config Configure() override {
    Config c;
    c.state_dirs = true;
    c.launcher_flags = {"--lease-ms", kLeaseMs};
    return c;
  }

  // hvdrun, attached, in the background: -np 4 over both agents running fault_worker.
  std::unique_ptr<Proc> StartJob(const std::vector<std::string>& worker_args,
                                 const std::vector<std::string>& hvdrun_flags = {}) {
    std::vector<std::string> args = {"-np", "4", "-H", "node-a:2,node-b:2"};
    args.insert(args.end(), hvdrun_flags.begin(), hvdrun_flags.end());
    args.push_back(FAULT_WORKER_PATH);
    args.insert(args.end(), worker_args.begin(), worker_args.end());
    return Start(Hvdrun("", args, true));
  }

  // A job whose rank 3 exits with `code` at step 20 while the others go on, run to its end.
  ProcResult RunWithRank3Exiting(const std::string& code) {
    return StartJob({"--steps", "0", "--exit-rank", "3", "--exit-at", "20", "--exit-code", code})
        ->Wait(seconds(30));
  }

  // Waits until `text` appears in the process's stdout.
  bool WaitOut(Proc* p, const std::string& text, milliseconds timeout = seconds(20)) {
    return WaitFor([&] { return p->Out().find(text) != std::string::npos; }, timeout);
  }

  // A pid the worker printed: "[R]<stdout>:rank R <what> PID".
  pid_t PrintedPid(Proc* p, int rank, const std::string& what) {
    const std::regex re("rank " + std::to_string(rank) + " " + what + " (\\d+)");
    std::smatch m;
    const std::string out = p->Out();
    if (!std::regex_search(out, m, re)) return 0;
    const pid_t pid = std::stoi(m[1]);
    pids_.insert(pid);
    return pid;
  }

  // The one job the launcher has, once it runs every rank.
  json RunningJob() {
    std::string id;
    WaitFor(
        [&] {
          std::set<std::string> ids = JobIds();
          if (ids.size() == 1) id = *ids.begin();
          return !id.empty();
        },
        seconds(10));
    EXPECT_FALSE(id.empty());
    return WaitJob(id, [](const json& j) { return AllRanks(j, "RUNNING"); });
  }

  // Milliseconds from `t0` until no worker of the test runs (polled), or -1 past the bound.
  int64_t MsUntilWorkersGone(Clock::time_point t0) {
    const bool gone = WorkersLeft(kTeardownBound).empty();
    if (!gone) return -1;
    return std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
  }

  static void Timing(const std::string& what, int64_t ms) {
    std::cerr << "[ timing   ] " << what << ": " << ms << " ms\n";
  }
};

TEST_F(Faults, ARankThatExits3FailsTheJobWithItsCodeAndStderr) {
  ProcResult r = RunWithRank3Exiting("3");
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_HAS(r.err, "failed: rank 3 on node-b exited with code 3");
  EXPECT_HAS(r.err, "rank 3 exits with code 3 at step 20 as asked");  // its stderr tail
  const std::string id = *JobIds().begin();
  json job = WaitJob(id, NoRankAlive);
  EXPECT_EQ(job["state"], "FAILED");
  EXPECT_EQ(job["failure"]["rank"], 3);
  EXPECT_EQ(job["exit_code"], 3);
  // Detection to teardown, from the launcher's own record: the failing rank's end to the last.
  int64_t last = 0;
  for (const json& rank : job["ranks"]) last = std::max<int64_t>(last, rank["end_time_ms"]);
  const int64_t ms = last - job["ranks"][3]["end_time_ms"].get<int64_t>();
  Timing("rank exit 3 -> every rank ended", ms);
  EXPECT_LT(ms, 5000);
}

// A rank that exits with code 0 while the others still train is no failure of its own, but the
// others fail waiting for it: the job's cause is one of them, and says what its runtime said of
// the rank that left (not only "exited with code 1").
TEST_F(Faults, ARankLeavingEarlyWithCode0IsNamedByTheCause) {
  ProcResult r = RunWithRank3Exiting("0");
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const size_t failed = r.err.find("failed: rank ");
  ASSERT_NE(failed, std::string::npos) << r.err;
  const std::string headline = r.err.substr(failed, r.err.find('\n', failed) - failed);
  EXPECT_HAS(headline, "exited with code 1 after its runtime reported: ");
  EXPECT_HAS(headline, "rank 3");
}

TEST_F(Faults, KillingARankFailsTheJobNamingTheSignal) {
  std::unique_ptr<Proc> run = StartJob({"--steps", "0"});
  ASSERT_TRUE(WaitOut(run.get(), "rank 2 step 5")) << run->Err();
  json job = RunningJob();
  const pid_t victim = job["ranks"][2]["pid"];
  const auto t0 = Clock::now();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ProcResult r = run->Wait(seconds(30));
  const int64_t ms = MsUntilWorkersGone(t0);
  Timing("kill -9 rank -> hvdrun exited", static_cast<int64_t>(r.seconds * 1000));
  Timing("kill -9 rank -> every process gone", ms);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
  EXPECT_HAS(r.err, "rank 2 on node-b was killed by SIGKILL");
  EXPECT_GE(ms, 0);
}

TEST_F(Faults, KillingARanksChildFailsTheRankAndTakesItsDaemonToo) {
  std::unique_ptr<Proc> run = StartJob({"--steps", "0", "--child", "--daemon"});
  ASSERT_TRUE(WaitOut(run.get(), "rank 1 step 3")) << run->Err();
  const pid_t child = PrintedPid(run.get(), 1, "child");
  const pid_t daemon = PrintedPid(run.get(), 0, "daemon");
  ASSERT_GT(child, 0) << run->Out();
  ASSERT_GT(daemon, 0) << run->Out();
  ASSERT_TRUE(clitest::ProcessAlive(daemon));
  const auto t0 = Clock::now();
  ASSERT_EQ(kill(child, SIGKILL), 0);
  ProcResult r = run->Wait(seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_HAS(r.err, "failed: rank 1 on node-a exited with code 1");
  EXPECT_HAS(r.err, "data loader worker (pid " + std::to_string(child) + ") is killed by signal");
  Timing("kill -9 a rank's child -> every process gone", MsUntilWorkersGone(t0));
  // The daemonized grandchild left its session: the wrapper (subreaper) and the cgroup end it.
  EXPECT_TRUE(WaitFor([&] { return !clitest::ProcessAlive(daemon); }, kTeardownBound));
}

TEST_F(Faults, KillingAnAgentEndsItsWorkersAtOnceAndFailsTheJobAsLost) {
  // Ranks that do not talk to each other: the agent's loss is the only failure to report.
  std::unique_ptr<Proc> run =
      Start(Hvdrun("",
                   {"-np", "4", "-H", "node-a:2,node-b:2", "--start-timeout", "0", "/bin/sh", "-c",
                    "echo $$ started; exec sleep 60"},
                   true));
  json job = RunningJob();
  const pid_t b2 = job["ranks"][2]["pid"], b3 = job["ranks"][3]["pid"];
  const auto t0 = Clock::now();
  agents_[1]->Signal(SIGKILL);
  agents_[1]->Wait(seconds(5));
  // Its workers die with it (the wrappers' lifelines), without waiting for any lease.
  ASSERT_TRUE(WaitFor([&] { return !clitest::ProcessAlive(b2) && !clitest::ProcessAlive(b3); },
                      kTeardownBound));
  Timing("kill -9 agent -> its workers gone",
         std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count());
  ProcResult r = run->Wait(seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_HAS(r.err, "agent on node-b lost");
  Timing("kill -9 agent -> job failed and torn down (lease 2 s)",
         static_cast<int64_t>(r.seconds * 1000));
  agents_[1].reset();  // gone: the teardown must not wait for it
}

TEST_F(Faults, ARestartedAgentReapsWhatItsPreviousRunLeft) {
  std::unique_ptr<Proc> run = StartJob({"--steps", "0", "--daemon"});
  ASSERT_TRUE(WaitOut(run.get(), "rank 0 step 3")) << run->Err();
  const pid_t daemon = PrintedPid(run.get(), 0, "daemon");
  ASSERT_GT(daemon, 0);
  const std::string cgroup = ReadAll("/proc/" + std::to_string(daemon) + "/cgroup");
  if (cgroup.find("hvd-agent.") == std::string::npos) {
    run->Signal(SIGINT);
    run->Wait(seconds(20));
    GTEST_SKIP() << "no job cgroups on this machine (" << cgroup
                 << "): only a cgroup can hold a daemon whose wrapper was killed too";
  }
  // A crash that takes the agent and the wrappers at once: nobody is left to clean up. (The agent
  // is stopped first so that it cannot see its wrappers die and kill their cgroups itself.)
  agents_[0]->Signal(SIGSTOP);
  for (const std::string& p : ProcessesMarked(marker_)) {
    if (p.find("hvd-wrapper") != std::string::npos) kill(std::atoi(p.c_str()), SIGKILL);
  }
  agents_[0]->Signal(SIGKILL);
  agents_[0]->Wait(seconds(5));
  std::this_thread::sleep_for(milliseconds(300));
  ASSERT_TRUE(clitest::ProcessAlive(daemon)) << "nothing to reap: the daemon died already";
  // ...until the agent starts again on the same --state-dir.
  const auto t0 = Clock::now();
  StartAgent(0);
  EXPECT_TRUE(WaitFor([&] { return !clitest::ProcessAlive(daemon); }, kTeardownBound))
      << "the restarted agent left pid " << daemon;
  Timing("agent restart -> previous run's leftovers reaped",
         std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count());
  run->Signal(SIGINT);
  ProcResult r = run->Wait(seconds(30));
  EXPECT_FALSE(r.timed_out);
}

TEST_F(Faults, KillingHvdrunCancelsItsAttachedJobAfterTheLease) {
  std::unique_ptr<Proc> run = StartJob({"--steps", "0"});
  ASSERT_TRUE(WaitOut(run.get(), "rank 3 step 2")) << run->Err();
  json job = RunningJob();
  const std::string id = job["id"];
  const auto t0 = Clock::now();
  run->Signal(SIGKILL);
  run->Wait(seconds(5));
  job = WaitJob(id, NoRankAlive, seconds(15));
  EXPECT_EQ(job["state"], "CANCELLED");
  EXPECT_HAS(job["reason"].get<std::string>(), "the hvdrun that submitted it attached went away");
  Timing("kill -9 hvdrun -> attached job cancelled, ranks gone (lease 2 s)",
         std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count());
}

TEST_F(Faults, ADetachedJobOutlivesItsClient) {
  const std::string id =
      Submit({"-np", "2", "-H", "node-a:1,node-b:1", FAULT_WORKER_PATH, "--steps", "0"});
  ASSERT_FALSE(id.empty());
  WaitJob(id, [](const json& j) { return AllRanks(j, "RUNNING"); });
  std::this_thread::sleep_for(milliseconds(2500));  // past the lease a client would have
  EXPECT_EQ(Get("/v1/jobs/" + id)["state"], "RUNNING");
  ProcResult r = Run(Hvdrun("cancel", {id}, false));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  WaitJob(id, NoRankAlive);
}

TEST_F(Faults, TheLauncherKilledAndRestartedWithinTheLeaseLosesNothing) {
  std::unique_ptr<Proc> run = StartJob({"--steps", "250", "--step-ms", "20"});
  ASSERT_TRUE(WaitOut(run.get(), "rank 0 step 10")) << run->Err();
  json job = RunningJob();
  const std::string id = job["id"];
  launcher_->Signal(SIGKILL);
  launcher_->Wait(seconds(5));
  const auto t0 = Clock::now();
  ASSERT_NO_FATAL_FAILURE(StartLauncher());
  ASSERT_NO_FATAL_FAILURE(WaitAgentsReady());
  Timing("launcher restart -> agents re-registered",
         std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count());
  json restored = Get("/v1/jobs/" + id);
  EXPECT_EQ(restored["state"], "RUNNING") << restored.dump(2);
  // The attached hvdrun reconnects and sees the job through.
  ProcResult r = run->Wait(seconds(40));
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "rank 3 done");
  EXPECT_EQ(WaitJob(id, NoRankAlive)["state"], "SUCCEEDED");
}

// The agent keeps a rank's exit report while the launcher is down and delivers it to the next
// one. (Ranks that talk to each other would fail along with it; which of them is the cause is
// then decided by the runtime's peer-failure records, which cannot be written while the launcher
// is away: docs/reliability.md.)
TEST_F(Faults, ARankExitDuringTheLauncherOutageIsStillTheCause) {
  std::unique_ptr<Proc> run = Start(
      Hvdrun("",
             {"-np", "4", "-H", "node-a:2,node-b:2", "--start-timeout", "0", "/bin/sh", "-c",
              "if [ \"$HVD_RANK\" = 1 ]; then sleep 1; echo bye >&2; exit 5; fi; exec sleep 60"},
             true));
  json job = RunningJob();
  const std::string id = job["id"];
  launcher_->Signal(SIGKILL);
  launcher_->Wait(seconds(5));
  // Rank 1 exits while the launcher is down; its agent keeps the news.
  ASSERT_TRUE(WaitFor([&] { return !clitest::ProcessAlive(job["ranks"][1]["pid"]); }, seconds(5)));
  ASSERT_NO_FATAL_FAILURE(StartLauncher());
  job = WaitJob(id, NoRankAlive, seconds(15));
  EXPECT_EQ(job["state"], "FAILED");
  EXPECT_EQ(job["failure"]["rank"], 1)
      << job.dump(2) << "\nlauncher: " << launcher_->Err() << "\nagent a: " << agents_[0]->Err();
  EXPECT_EQ(job["failure"]["stderr_tail"], "bye");
  EXPECT_EQ(job["exit_code"], 5);
  ProcResult r = run->Wait(seconds(40));
  EXPECT_EQ(r.exit_code, 5) << r.err;
}

TEST_F(Faults, AgentsEndTheJobWhenTheLauncherStaysAway) {
  const std::string id =
      Submit({"-np", "2", "-H", "node-a:1,node-b:1", FAULT_WORKER_PATH, "--steps", "0"});
  json job = WaitJob(id, [](const json& j) { return AllRanks(j, "RUNNING"); });
  const std::vector<pid_t> pids = RankPids(job);
  const auto t0 = Clock::now();
  launcher_->Signal(SIGKILL);
  launcher_->Wait(seconds(5));
  launcher_.reset();
  // The agents keep the job for the lease (2 s), then end it: nothing is orphaned.
  EXPECT_TRUE(WaitFor(
      [&] {
        for (pid_t p : pids) {
          if (clitest::ProcessAlive(p)) return false;
        }
        return true;
      },
      seconds(15)));
  Timing("launcher gone -> agents ended its job (lease 2 s)",
         std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count());
}

TEST_F(Faults, AStoppedRankIsReportedAsAStallThenFailsTheJob) {
  std::unique_ptr<Proc> run =
      StartJob({"--steps", "0"}, {"--stall-check-time", "1", "--stall-timeout", "4"});
  ASSERT_TRUE(WaitOut(run.get(), "rank 3 step 5")) << run->Err();
  json job = RunningJob();
  const std::string id = job["id"];
  const pid_t victim = job["ranks"][3]["pid"];
  const auto t0 = Clock::now();
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  // The record names the stopped rank before the stall timeout fails the job. (The ranks' reports
  // arrive within a poll interval of each other; until the last, the end of the wait chain may be
  // a rank that has simply not reported yet.)
  json stalled = WaitJob(
      id,
      [](const json& j) {
        return j["stall"].get<std::string>().find("rank 3 on node-b") != std::string::npos;
      },
      seconds(10));
  EXPECT_HAS(stalled["stall"].get<std::string>(), "rank 3 on node-b");
  Timing("SIGSTOP rank -> stall reported",
         std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count());
  ProcResult status = Run(Hvdrun("status", {id}, false));
  EXPECT_HAS(status.out, "stalled:");
  EXPECT_HAS(status.out, "rank 3 on node-b");
  ProcResult r = run->Wait(seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_HAS(r.err, "(--stall-timeout 4 s): rank 3 on node-b");
  EXPECT_HAS(r.err, "hvdrun: job " + id + " stalled: rank 3 on node-b");
  Timing("SIGSTOP rank -> job failed (stall timeout 4 s)", static_cast<int64_t>(r.seconds * 1000));
}

TEST_F(Faults, AHungRankIsNamedWithTheTensorItHasNotSubmitted) {
  std::unique_ptr<Proc> run = StartJob({"--steps", "0", "--hang-rank", "2", "--hang-at", "5"},
                                       {"--stall-check-time", "1", "--stall-timeout", "3"});
  ProcResult r = run->Wait(seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_HAS(r.err, "rank 2 on node-b has not submitted allreduce 'grad' for");
}

// The runtime's own stall shutdown (Horovod's --stall-check-shutdown-time-seconds) fails the
// tensor on the ranks that submitted it, which then exit 1. The job's cause is the hung rank,
// not the first of them to exit, and the stall is never said to be over.
TEST_F(Faults, ARankHungPastTheStallShutdownTimeIsTheCause) {
  std::unique_ptr<Proc> run =
      StartJob({"--steps", "0", "--hang-rank", "2", "--hang-at", "5"},
               {"--stall-check-time", "1", "--stall-check-shutdown-time-seconds", "3"});
  ProcResult r = run->Wait(seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_HAS(r.err, "failed: stalled: rank 2 on node-b has not submitted allreduce 'grad' for");
  EXPECT_HAS(r.err, "after HVD_STALL_SHUTDOWN_TIME_SECONDS=3; then rank ");
  EXPECT_EQ(r.err.find("making progress again"), std::string::npos) << r.err;
  const std::set<std::string> ids = JobIds();
  ASSERT_EQ(ids.size(), 1u);
  json job = WaitJob(*ids.begin(), NoRankAlive, seconds(10));
  EXPECT_EQ(job["failure"]["rank"], 2) << job.dump();
}

TEST_F(Faults, AMissingBinaryFailsAtOnceNamingThePath) {
  ProcResult r =
      Run(Hvdrun("", {"-np", "4", "-H", "node-a:2,node-b:2", "/nonexistent/train"}, true));
  EXPECT_EQ(r.exit_code, 127) << r.err;
  EXPECT_HAS(r.err, "failed to start: exec /nonexistent/train: No such file or directory");
  Timing("missing binary -> hvdrun exited", static_cast<int64_t>(r.seconds * 1000));
  EXPECT_LT(r.seconds, 10);
}

TEST_F(Faults, ARankThatNeverReachesTheRendezvousIsNamedAfterTheStartTimeout) {
  ProcResult r = Run(Hvdrun("",
                            {"-np", "2", "-H", "node-a:1,node-b:1", "--start-timeout", "2",
                             "/bin/sh", "-c", "exec sleep 60"},
                            true));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_HAS(r.err, "ranks 0, 1 did not reach the rendezvous within 2.0 s (--start-timeout)");
  EXPECT_HAS(r.err, "rank 1 on node-b: running as pid");
}

TEST_F(Faults, MaxRestartsRunsTheJobAgainUntilItSucceeds) {
  ProcResult r = Run(Hvdrun("",
                            {"-np", "4", "-H", "node-a:2,node-b:2", "--max-restarts", "2",
                             FAULT_WORKER_PATH, "--steps", "30", "--exit-rank", "2", "--exit-at",
                             "10", "--exit-code", "3", "--exit-attempt", "0"},
                            true),
                     seconds(60));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(
      r.err,
      "attempt 1 (HVD_ATTEMPT=0) failed: rank 2 on node-b exited with code 3; restart 1 of 2");
  EXPECT_HAS(r.out, "rank 2 pid");
  EXPECT_HAS(r.out, "attempt 1");
  EXPECT_HAS(r.out, "rank 0 done");
  json job = Get("/v1/jobs/" + *JobIds().begin());
  EXPECT_EQ(job["state"], "SUCCEEDED");
  EXPECT_EQ(job["attempt"], 1);
  ASSERT_EQ(job["previous_failures"].size(), 1u);
  EXPECT_EQ(job["previous_failures"][0]["rank"], 2);
}

}  // namespace
}  // namespace hvd::integrationtest
