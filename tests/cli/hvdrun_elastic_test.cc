// Elastic jobs end to end (docs/elastic.md): the real hvdrun in local mode runs a Horovod elastic
// script (tests/cli/elastic_program.py: hvd.elastic.run, TorchState, commit) on real processes;
// workers die with kill -9 or an exit code mid-training; the survivors re-form in place, restore
// the last commit and finish with the exact model a run from that commit at the smaller size
// gives. Falling below --min-np with no slot left fails the job at once naming what was lost;
// --reset-limit bounds the changes. Nothing the job started outlives it (Leftovers). Skips when
// /usr/bin/python3 has no torch.
#include <gtest/gtest.h>
#include <stdio.h>

#include <thread>

#include "testutil/expect.h"

#include "hvdrun_process.h"

#ifndef HVDRUN_PATH
#error "HVDRUN_PATH must name the built hvdrun (tests/CMakeLists.txt)"
#endif
#ifndef HVD_PYTHON_DIR
#error "HVD_PYTHON_DIR must name build/python (tests/CMakeLists.txt)"
#endif

namespace hvd::clitest {
namespace {

constexpr auto kJobTimeout = std::chrono::seconds(90);
const std::string kProgram = std::string(HVD_SOURCE_DIR) + "/tests/cli/elastic_program.py";

class HvdrunElastic : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = TorchMissing(dir_.path()); !why.empty()) GTEST_SKIP() << why;
  }
  void TearDown() override { EXPECT_EQ(Leftovers(), std::vector<std::string>{}); }

  ProcResult Hvdrun(std::vector<std::string> args, const std::vector<std::string>& program_args) {
    args.insert(args.begin(), HVDRUN_PATH);
    args.push_back(kTestPython);
    args.push_back(kProgram);
    args.insert(args.end(), program_args.begin(), program_args.end());
    return RunProcess(
        args, dir_.path(), kJobTimeout,
        {"HVD_LAUNCHER=", "HVD_TOKEN_FILE=", std::string("PYTHONPATH=") + HVD_PYTHON_DIR},
        dir_.path());
  }

  // Three workers, worker 2 stuck in user code from step 5 (hvd's own thread still answers),
  // the stall check at 1 s and `stall_flags`: the job must go on as two and finish (3*5 + 2*7).
  ProcResult StuckWorkerGoesOn(const std::vector<std::string>& stall_flags) {
    std::vector<std::string> flags = {
        "-np",          "3", "--min-np",           "2", "--gloo-timeout-seconds", "2",
        "--kill-grace", "1", "--stall-check-time", "1"};
    flags.insert(flags.end(), stall_flags.begin(), stall_flags.end());
    ProcResult r = Hvdrun(
        flags, {"--steps", "12", "--die-worker", "2", "--die-at-step", "5", "--die-code", "-20"});
    EXPECT_FALSE(r.timed_out) << r.out << r.err;
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_HAS(r.out, "[0]<stdout>:worker 0 final: rank 0/2 weight 29 steps 12");
    return r;
  }

  TempDir dir_;
};

TEST_F(HvdrunElastic, KillNineOfOneWorkerOfFourTheOthersFinishWithTheRestoredModel) {
  ProcResult r = Hvdrun({"-np", "4", "--min-np", "2"},
                        {"--steps", "20", "--die-worker", "3", "--die-at-step", "5"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "[3]<stdout>:worker 3 dies at step 5");
  // 5 steps at 4 workers, restored to the commit of step 5, then 15 at 3: 4*5 + 3*15.
  for (int w = 0; w < 3; ++w) {
    const std::string me = std::to_string(w);
    EXPECT_HAS(r.out, "[" + me + "]<stdout>:worker " + me + " reset: rank " + me + "/3 at step 5");
    EXPECT_HAS(r.out, "[" + me + "]<stdout>:worker " + me + " final: rank " + me +
                          "/3 weight 65 steps 20");
  }
  EXPECT_HAS(r.err, "generation 1: worker 3 on ");
  EXPECT_HAS(r.err, " was killed by SIGKILL (signal 9); 3 workers go on");
}

TEST_F(HvdrunElastic, AHungWorkerIsRemovedAndTheOthersFinish) {
  // Worker 2 stops itself (SIGSTOP) before its step-5 allreduce: it neither exits nor answers.
  // The others' collective fails after the peer timeout, they meet to re-form, report it absent
  // after another, and the launcher stops it: they go on as two.
  const auto start = std::chrono::steady_clock::now();
  ProcResult r =
      Hvdrun({"-np", "3", "--min-np", "2", "--gloo-timeout-seconds", "2", "--kill-grace", "1"},
             {"--steps", "12", "--die-worker", "2", "--die-at-step", "5", "--die-code", "-19"});
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "[2]<stdout>:worker 2 dies at step 5");
  EXPECT_HAS(r.out, "[0]<stdout>:worker 0 final: rank 0/2 weight 29 steps 12");  // 3*5 + 2*7
  EXPECT_HAS(r.out, "[1]<stdout>:worker 1 final: rank 1/2 weight 29 steps 12");
  EXPECT_HAS(r.err, "worker 2 on ");
  EXPECT_HAS(r.err, " was removed: it did not come back to re-form generation 0 while worker ");
  EXPECT_HAS(r.err, "2 workers go on");
  // Not --elastic-timeout's 600 s: two peer timeouts and the kill grace, with start-up.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

// Stuck in user code: hvd's own thread still answers, so the others see a stall, not a silent
// peer. With a stall shutdown time their operation fails, they re-form, and the stuck worker,
// which never comes, is removed.
TEST_F(HvdrunElastic, AWorkerStuckOutsideHvdIsRemovedAfterTheStallShutdownTime) {
  ProcResult r = StuckWorkerGoesOn({"--stall-check-shutdown-time-seconds", "3"});
  EXPECT_HAS(r.err, "the operation failed on those ranks after HVD_STALL_SHUTDOWN_TIME_SECONDS=3");
  EXPECT_HAS(r.err, " was removed: it did not come back to re-form generation 0 while worker ");
}

// The same with --stall-timeout: the launcher stops the worker the others stall on, and they
// re-form without it (a fixed job would fail).
TEST_F(HvdrunElastic, AWorkerStuckOutsideHvdIsRemovedAtTheStallTimeout) {
  ProcResult r = StuckWorkerGoesOn({"--stall-timeout", "3"});
  EXPECT_HAS(r.err, "worker 2 on ");
  EXPECT_HAS(r.err, " is being removed: stalled for ");
  EXPECT_HAS(r.err, " s (--stall-timeout 3 s): ");
  EXPECT_HAS(r.err, "2 workers go on");
}

TEST_F(HvdrunElastic, AWorkerLateForTheStartTimeoutIsLeftOutWhenMinNpMet) {
  ProcResult r = Hvdrun({"-np", "3", "--min-np", "2", "--start-timeout", "10"},
                        {"--steps", "6", "--late-worker", "2"});
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:worker 0 final: rank 0/2 weight 12 steps 6");
  EXPECT_HAS(r.err, "worker 2 on ");
  EXPECT_HAS(r.err, " was removed: it did not reach hvd.init() within 10 s (--start-timeout; ");
}

// A worker added by growth that never reaches hvd.init(): the others wait for it at their meeting
// until --start-timeout from its own start, then it is removed and they train on without it
// (they waited --elastic-timeout, 600 s, before).
TEST_F(HvdrunElastic, AWorkerAddedByGrowthThatNeverReachesInitIsRemoved) {
  ProcResult r = Hvdrun({"-np", "2", "--min-np", "1", "--max-np", "3", "--start-timeout", "8"},
                        {"--steps", "20", "--step-sleep", "0.02", "--late-worker", "2"});
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.err, " joined; 3 workers (--max-np 3)");
  EXPECT_HAS(r.err,
             " was removed: it did not reach hvd.init() within 8.0 s of being added to the "
             "job (--start-timeout; running as pid ");
  // Worker 2 never trained: every step ran on 2.
  EXPECT_HAS(r.out, "[0]<stdout>:worker 0 final: rank 0/2 weight 40 steps 20");
  EXPECT_HAS(r.out, "[1]<stdout>:worker 1 final: rank 1/2 weight 40 steps 20");
  EXPECT_LT(r.seconds, 60) << r.err;
}

// Workers 0 and 1 meet for the first time in the generation that has newcomer 2, which never
// comes; worker 1 hangs there (SIGSTOP at 4 s) before any session formed. Once 2 is removed, 0
// meets 1 again in the next generation: it saw 1 arrive before, so it reports it absent and the
// launcher removes it (nobody did: 0 had formed no session with 1, and the job hung until
// --elastic-timeout). Worker 0 finishes alone.
TEST_F(HvdrunElastic, AWorkerThatHangsAtItsFirstMeetingIsRemoved) {
  ProcResult r = Hvdrun({"-np", "2", "--min-np", "1", "--max-np", "3", "--start-timeout", "8",
                         "--kill-grace", "1", "-x", "HVD_PEER_TIMEOUT_SECONDS=2"},
                        {"--steps", "20", "--step-sleep", "0.02", "--late-worker", "2",
                         "--stop-worker", "1", "--stop-after", "4"});
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.err, "worker 1 on ");
  EXPECT_HAS(r.err, " was removed: it did not come back to re-form generation ");
  EXPECT_HAS(r.out, "[0]<stdout>:worker 0 final: rank 0/1 ");
  EXPECT_HAS(r.out, " steps 20");
}

TEST_F(HvdrunElastic, RankZeroLeavesAndTheOthersRenumber) {
  // Rank 0 (the coordinator, the broadcast root) exits with an error: worker 1 becomes rank 0.
  ProcResult r = Hvdrun({"-np", "3", "--min-np", "1"}, {"--steps", "12", "--die-worker", "0",
                                                        "--die-at-step", "4", "--die-code", "7"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "[1]<stdout>:worker 1 final: rank 0/2 weight 28 steps 12");  // 3*4 + 2*8
  EXPECT_HAS(r.out, "[2]<stdout>:worker 2 final: rank 1/2 weight 28 steps 12");
  EXPECT_HAS(r.err, "worker 0 on ");
  EXPECT_HAS(r.err, "exited with code 7; 2 workers go on");
}

TEST_F(HvdrunElastic, TwoLossesMakeTwoGenerations) {
  ProcResult r = Hvdrun({"-np", "4", "--min-np", "2"}, {"--steps", "10", "--die-worker", "1",
                                                        "--die-worker", "2", "--die-at-step", "3"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  // Both die at step 3, in one generation change or two: either way 4*3 + 2*7.
  EXPECT_HAS(r.out, "[0]<stdout>:worker 0 final: rank 0/2 weight 26 steps 10");
  EXPECT_HAS(r.out, "[3]<stdout>:worker 3 final: rank 1/2 weight 26 steps 10");
}

// Local mode's agent has --max-np slots, and a failed worker's slot is not used again: below
// --min-np there, no worker can ever come, and the job fails at once instead of waiting
// --elastic-timeout (600 s) for nothing. (The wait itself: job_elastic_test, job_stranded_test.)
TEST_F(HvdrunElastic, BelowMinNpWithNoSlotLeftFailsAtOnceNamingTheLoss) {
  ProcResult r = Hvdrun({"-np", "2", "--min-np", "2"}, {"--steps", "1000", "--die-worker", "1",
                                                        "--die-at-step", "2", "--die-code", "5"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.err, "1 worker left, fewer than --min-np 2: waiting up to --elastic-timeout 600 s");
  EXPECT_HAS(r.err,
             "fewer than --min-np 2 workers (1 live), and no worker can come: the agents' 2 "
             "slots: 1 held by live workers, 1 of failed workers (a failed worker's slot is not "
             "used again); not waiting --elastic-timeout: worker 1 on ");
  EXPECT_HAS(r.err, "exited with code 5");
  EXPECT_LT(r.seconds, 40) << r.err;  // the survivor waiting in hvd.init() was ended, not waited
}

TEST_F(HvdrunElastic, ResetLimitEndsTheJobAtTheChangeTooMany) {
  // Two losses 2 s apart (steps of 0.2 s): the second is one change too many. (Losses within a
  // second of each other count as one change: job_elastic_test.)
  ProcResult r = Hvdrun(
      {"-np", "4", "--min-np", "1", "--reset-limit", "1"},
      {"--steps", "1000", "--die-worker", "3@3", "--die-worker", "2@13", "--step-sleep", "0.2"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.err, "generation 1: worker 3 on ");
  EXPECT_HAS(r.err, "the job already changed membership 1 time (--reset-limit 1)");
}

// Local mode's agent has --max-np slots: the job starts 2 workers and grows to 3 as soon as it
// runs. The first two usually meet generation 1 at their first hvd.init(); when they were faster,
// they move to it at a commit (HostsUpdatedInterrupt) and the new one gets the state from rank 0
// (tests/integration/elastic_cluster_test.cc makes that happen on purpose).
// With --start-timeout 6 and a run of about 9 s, the launcher must see every worker arrive at its
// meeting in generation 1 (by its index there), or it would remove a healthy one. (6 s: time for
// Python to import torch on a loaded 2-CPU machine.)
TEST_F(HvdrunElastic, GrowsToMaxNpAndTheNewWorkerGetsTheState) {
  ProcResult r = Hvdrun({"-np", "2", "--min-np", "1", "--max-np", "3", "--start-timeout", "6"},
                        {"--steps", "180", "--step-sleep", "0.05"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.err, "generation 1: worker 2 on ");
  EXPECT_HAS(r.err, " joined; 3 workers (--max-np 3)");
  EXPECT_EQ(r.err.find(" is being removed"), std::string::npos) << r.err;
  // The step at which workers 0 and 1 moved: weight = 2*k + 3*(180-k) on every worker.
  const std::string marker = "[0]<stdout>:worker 0 reset: rank 0/3 at step ";
  const size_t at = r.out.find(marker);
  const int k = at == std::string::npos ? 0 : std::atoi(r.out.c_str() + at + marker.size());
  const std::string weight = "weight " + std::to_string(2 * k + 3 * (180 - k)) + " steps 180";
  for (int w = 0; w < 3; ++w) {
    const std::string me = std::to_string(w);
    EXPECT_HAS(r.out, "[" + me + "]<stdout>:worker " + me + " final: rank " + me + "/3 " + weight);
  }
}

// Workers that fail on a host are not replaced in a loop: each failed worker's slot is dropped,
// and the host is left out once two of the job's workers failed there.
TEST_F(HvdrunElastic, AHostWhoseWorkersKeepFailingIsLeftOut) {
  ProcResult r = Hvdrun({"-np", "2", "--min-np", "1", "--max-np", "4"},
                        {"--steps", "20", "--fail-workers-from", "2"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "[2]<stdout>:worker 2 fails at start");
  EXPECT_HAS(r.out, "[3]<stdout>:worker 3 fails at start");
  EXPECT_EQ(r.out.find("[4]<stdout>"), std::string::npos) << "a fifth worker was started:\n"
                                                          << r.out;
  EXPECT_HAS(r.out, "[0]<stdout>:worker 0 final: rank 0/2 ");
  EXPECT_HAS(r.out, "[1]<stdout>:worker 1 final: rank 1/2 ");
}

// The same loop in C++ (examples/elastic_train.cc): Shutdown and Init re-form the job, the state
// goes back to the last commit and is broadcast; every rank ends with rank 0's converged model.
TEST_F(HvdrunElastic, TheCppLoopSurvivesAKilledWorker) {
  ProcResult r =
      RunProcess({HVDRUN_PATH, "-np", "4", "--min-np", "2", ELASTIC_TRAIN_PATH, "--steps", "150",
                  "--die-worker", "2", "--die-at-step", "23"},
                 dir_.path(), kJobTimeout, {"HVD_LAUNCHER=", "HVD_TOKEN_FILE="}, dir_.path());
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "[2]<stdout>:worker 2 dies at step 23");
  EXPECT_HAS(r.out, "re-forms: ");
  for (const char* w : {"0", "1", "3"}) {
    EXPECT_HAS(r.out, std::string("<stdout>:worker ") + w + " final: rank ");
  }
  EXPECT_HAS(r.out, "/3 step 150 drift 0 error ");
  EXPECT_HAS(r.err, "generation 1: worker 2 on ");
}

// horovodrun's --host-discovery-script: its first answer is the job's hosts; a later answer with
// more slots grows the job; an answer that is not host lines is reported once and changes
// nothing.
TEST_F(HvdrunElastic, DiscoveryScriptGrowsTheJobAndGarbageDoesNotDisturbIt) {
  const std::string hosts = dir_ / "hosts";
  WriteFile(hosts, "localhost:2\n");
  std::thread changer([&] {
    std::this_thread::sleep_for(std::chrono::seconds(4));
    WriteFile(hosts + ".new", "localhost:3\n");
    rename((hosts + ".new").c_str(), hosts.c_str());
    std::this_thread::sleep_for(std::chrono::seconds(3));
    WriteFile(hosts + ".new", "localhost:3\n%%not a host\n");
    rename((hosts + ".new").c_str(), hosts.c_str());
  });
  ProcResult r = Hvdrun(
      {"-np", "2", "--min-np", "1", "--max-np", "3", "--host-discovery-script", "cat " + hosts},
      {"--steps", "200", "--step-sleep", "0.05"});
  changer.join();
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.err, "generation 1: worker 2 on localhost joined; 3 workers (--max-np 3)");
  EXPECT_HAS(r.err, "printed '%%not a host' on line 2");
  EXPECT_HAS(r.err, "the job keeps the hosts it has");
  for (int w = 0; w < 3; ++w) {
    const std::string me = std::to_string(w);
    EXPECT_HAS(r.out, "[" + me + "]<stdout>:worker " + me + " final: rank " + me + "/3 ");
  }
}

// The discovery script's list shrinking: the newest worker above the host's new count is stopped
// (not as a failure) and the others re-form without it; the slot is used again when the list
// gives it back.
TEST_F(HvdrunElastic, DiscoveryScriptShrinksTheJobAndGrowsItBack) {
  const std::string hosts = dir_ / "hosts";
  WriteFile(hosts, "localhost:3\n");
  std::thread changer([&] {
    for (const char* list : {"localhost:2\n", "localhost:3\n"}) {
      std::this_thread::sleep_for(std::chrono::seconds(5));
      WriteFile(hosts + ".new", list);
      rename((hosts + ".new").c_str(), hosts.c_str());
    }
  });
  ProcResult r = Hvdrun(
      {"-np", "3", "--min-np", "1", "--max-np", "3", "--host-discovery-script", "cat " + hosts},
      {"--steps", "400", "--step-sleep", "0.05"});
  changer.join();
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.err,
             "worker 2 on localhost is being removed: localhost has 2 slots in "
             "--host-discovery-script's list now, and 3 of the job's workers");
  EXPECT_HAS(r.err, "generation 1: worker 2 on localhost was removed: ");
  EXPECT_HAS(r.err, "generation 2: worker 3 on localhost joined; 3 workers (--max-np 3)");
  for (const char* w : {"0", "1", "3"}) {
    EXPECT_HAS(r.out, std::string("<stdout>:worker ") + w + " final: rank ");
  }
  EXPECT_HAS(r.out, "/3 weight ");
}

// A failed worker's slot is not used again: with the discovery script's 3 slots and --max-np 4,
// the two survivors go on alone (a fourth worker was started in the failed one's place: the
// host's slots were counted against the live workers only).
TEST_F(HvdrunElastic, AFailedWorkersSlotIsNotRefilledFromTheHostsCount) {
  const std::string hosts = dir_ / "hosts";
  WriteFile(hosts, "localhost:3\n");
  ProcResult r = Hvdrun(
      {"-np", "3", "--min-np", "1", "--max-np", "4", "--host-discovery-script", "cat " + hosts},
      {"--steps", "40", "--step-sleep", "0.05", "--die-worker", "1"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.err, "generation 1: worker 1 on localhost");
  EXPECT_EQ(r.err.find("joined"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("[3]<stdout>"), std::string::npos) << "a fourth worker started:\n" << r.out;
  EXPECT_HAS(r.out, "[0]<stdout>:worker 0 final: rank 0/2 ");
  EXPECT_HAS(r.out, "[2]<stdout>:worker 2 final: rank 1/2 ");
}

TEST_F(HvdrunElastic, ADiscoveryScriptPrintingGarbageAtStartIsRefused) {
  const std::string script = dir_ / "discover.sh";
  WriteFile(script, "#!/bin/sh\necho 'node-a:two'\n", 0755);
  ProcResult r = Hvdrun({"-np", "2", "--min-np", "1", "--host-discovery-script", script}, {});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "printed 'node-a:two' on line 1");
  EXPECT_HAS(r.err, "one host per line, as HOST:SLOTS or HOST");
  WriteFile(script, "#!/bin/sh\necho broken >&2\nexit 4\n", 0755);
  r = Hvdrun({"-np", "2", "--min-np", "1", "--host-discovery-script", script}, {});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "failed (exit code 4): broken");
}

TEST_F(HvdrunElastic, BadNumbersAreRefusedBeforeAnythingStarts) {
  ProcResult r = Hvdrun({"-np", "4", "--min-np", "5"}, {});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "need 1 <= --min-np <= -np <= --max-np");
  r = Hvdrun({"-np", "4", "--min-np", "2", "--max-np", "3"}, {});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "--max-np 3");
  r = Hvdrun({"-np", "2", "--min-np", "0"}, {});  // was run as --min-np 2
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "--min-np 0: an elastic job needs at least 1 worker");
  r = Hvdrun({"-np", "2", "--elastic-timeout", "5"}, {});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "--elastic-timeout: applies to elastic jobs only");
}

}  // namespace
}  // namespace hvd::clitest
