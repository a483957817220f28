// hvdrun in local mode, end to end as real processes: the embedded launcher and agent start the
// ranks, hvdrun prints their output tagged, exits with the job's exit code, and on SIGINT cancels
// the job and leaves only once its ranks are gone. Every test proves that nothing it started
// survives (the test process is the subreaper of everything hvdrun spawns).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "testutil/expect.h"

#include "hvdrun_process.h"

#ifndef HVDRUN_PATH
#error "HVDRUN_PATH must name the built hvdrun (tests/CMakeLists.txt)"
#endif

namespace hvd::clitest {
namespace {

constexpr auto kJobTimeout = std::chrono::seconds(60);

class HvdrunLocal : public ::testing::Test {
 protected:
  std::vector<std::string> Args(std::vector<std::string> args) {
    args.insert(args.begin(), HVDRUN_PATH);
    return args;
  }
  std::vector<std::string> Env() const { return {"HVD_LAUNCHER=", "HVD_TOKEN_FILE="}; }
  ProcResult Hvdrun(const std::vector<std::string>& args,
                    std::chrono::milliseconds timeout = kJobTimeout) {
    return RunProcess(Args(args), dir_.path(), timeout, Env(), dir_.path());
  }
  // Ctrl-C (SIGINT) or SIGTERM to an attached hvdrun cancels the job: it exits 128+signal
  // within the teardown bound, and no rank's process remains. Ranks write their pid to pid.RANK.
  void InterruptMidJob(const std::vector<std::string>& args, int sig) {
    Proc p(Args(args), dir_.path(), Env(), dir_.path());
    std::vector<pid_t> pids;
    for (int rank : {0, 1}) {
      pid_t pid = 0;
      for (int i = 0; i < 3000 && pid == 0; ++i) {  // bounded: 30 s
        const std::string s = ReadAll(dir_ / ("pid." + std::to_string(rank)));
        if (!s.empty() && s.back() == '\n') pid = std::atoi(s.c_str());
        if (pid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ASSERT_GT(pid, 0) << "rank " << rank << " never started: " << p.Err();
      ASSERT_TRUE(ProcessAlive(pid));
      pids.push_back(pid);
    }
    kill(-p.pid(), sig);  // as a terminal does: the whole foreground group
    ProcResult r = p.Wait(std::chrono::seconds(20));
    ASSERT_FALSE(r.timed_out) << r.err;
    EXPECT_EQ(r.exit_code, 128 + sig) << r.err;
    EXPECT_HAS(r.err, "cancelling job");
    for (pid_t pid : pids) EXPECT_FALSE(ProcessAlive(pid)) << "rank process " << pid << " survived";
  }
  void TearDown() override { EXPECT_EQ(Leftovers(), std::vector<std::string>{}); }

  TempDir dir_;
};

TEST_F(HvdrunLocal, TagsEveryRanksOutputAndExitsZero) {
  ProcResult r =
      Hvdrun({"-np", "2", "/bin/sh", "-c", "echo hi from $HVD_RANK; echo warn $HVD_RANK >&2"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:hi from 0\n");
  EXPECT_HAS(r.out, "[1]<stdout>:hi from 1\n");
  EXPECT_HAS(r.err, "[0]<stderr>:warn 0\n");
  EXPECT_HAS(r.err, "[1]<stderr>:warn 1\n");
  EXPECT_EQ(r.out.find("<stderr>"), std::string::npos) << r.out;
}

TEST_F(HvdrunLocal, ShellStyleProgramLookupAndWorkerEnvironment) {
  // `sh` comes from PATH; -x passes a value and copies one; the knobs become HVD_* variables.
  ProcResult r = RunProcess(
      Args({"-np", "1", "-x", "GREETING=hello world", "-x", "HVDRUN_COPIED",
            "--fusion-threshold-mb", "2", "--cycle-time-ms", "2.5", "--timeline-filename", "t.json",
            "--start-timeout", "7", "sh", "-c",
            "echo \"$GREETING|$HVDRUN_COPIED|$HVD_FUSION_THRESHOLD|$HVD_CYCLE_TIME|$HVD_TIMELINE|"
            "$HVD_START_TIMEOUT_SECONDS|$HVD_SIZE|$(pwd)\""}),
      dir_.path(), kJobTimeout, {"HVD_LAUNCHER=", "HVD_TOKEN_FILE=", "HVDRUN_COPIED=copied"},
      dir_.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The runtime waits 10 s longer than the launcher, whose start-timeout message is the richer.
  EXPECT_HAS(r.out, "[0]<stdout>:hello world|copied|2097152|2.5|t.json|17|1|" + dir_.path() + "\n");
}

// GPU visibility through the embedded agent, whose GPUs here are hvdrun's CUDA_VISIBLE_DEVICES (no
// GPU needed): by default every rank sees them all, as under horovodrun; --gpu-isolation gives each
// rank its slot's alone (docs/gpu.md).
TEST_F(HvdrunLocal, EveryRankSeesTheHostsGpusUnlessIsolated) {
  const std::string show = "echo \"cvd=$CUDA_VISIBLE_DEVICES\"";
  for (bool isolate : {false, true}) {
    std::vector<std::string> args = {"-np", "2", "/bin/sh", "-c", show};
    if (isolate) args.insert(args.begin(), "--gpu-isolation");
    ProcResult r =
        RunProcess(Args(args), dir_.path(), kJobTimeout,
                   {"HVD_LAUNCHER=", "HVD_TOKEN_FILE=", "CUDA_VISIBLE_DEVICES=4,6"}, dir_.path());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_HAS(r.out, isolate ? "[0]<stdout>:cvd=4\n" : "[0]<stdout>:cvd=4,6\n");
    EXPECT_HAS(r.out, isolate ? "[1]<stdout>:cvd=6\n" : "[1]<stdout>:cvd=4,6\n");
  }
}

TEST_F(HvdrunLocal, WorkingDirAndRelativeProgram) {
  mkdir((dir_ / "wd").c_str(), 0755);
  WriteFile(dir_ / "wd/prog.sh", "#!/bin/sh\necho \"in $(pwd) as $0\"\n", 0755);
  ProcResult r = Hvdrun({"-np", "1", "--working-dir", "wd", "./prog.sh"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:in " + (dir_ / "wd") + " as " + (dir_ / "wd/prog.sh"));
}

TEST_F(HvdrunLocal, FailingRankGivesItsExitCodeAndIsNamed) {
  ProcResult r = Hvdrun({"-np", "2", "/bin/sh", "-c",
                         "if [ $HVD_RANK = 1 ]; then echo rank one broke >&2; exit 3; fi; "
                         "exec sleep 30"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_HAS(r.err, "rank 1");
  EXPECT_HAS(r.err, "code 3");
  EXPECT_HAS(r.err, "rank one broke");
  // Rank 0's `sleep 30` was ended by the teardown, not waited for.
  EXPECT_LT(r.seconds, 20) << r.err;
}

TEST_F(HvdrunLocal, SignalKilledRankGives128PlusSignal) {
  ProcResult r = Hvdrun(
      {"-np", "2", "/bin/sh", "-c", "if [ $HVD_RANK = 0 ]; then kill -KILL $$; fi; exec sleep 30"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
  EXPECT_HAS(r.err, "rank 0");
  EXPECT_HAS(r.err, "SIGKILL");
  EXPECT_LT(r.seconds, 20) << r.err;
}

TEST_F(HvdrunLocal, OutputFilenameWritesEachRanksFiles) {
  ProcResult r = Hvdrun({"-np", "2", "--output-filename", "logs", "/bin/sh", "-c",
                         "echo out $HVD_RANK; echo err $HVD_RANK >&2; echo more $HVD_RANK"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (int rank : {0, 1}) {
    const std::string d = dir_ / ("logs/rank." + std::to_string(rank));
    const std::string n = std::to_string(rank);
    EXPECT_EQ(ReadAll(d + "/stdout"), "out " + n + "\nmore " + n + "\n");
    EXPECT_EQ(ReadAll(d + "/stderr"), "err " + n + "\n");
  }
  EXPECT_HAS(r.out, "[1]<stdout>:more 1");  // still shown on the terminal
}

// horovodrun's naming: 11 ranks are rank.00 ... rank.10, and every rank's files exist, made
// before the job started, even for ranks that print nothing.
TEST_F(HvdrunLocal, OutputFilenamePadsRankDirectoriesAndMakesThemUpFront) {
  ProcResult r = Hvdrun({"-np", "11", "--start-timeout", "0", "--output-filename", "logs",
                         "/bin/sh", "-c", "if [ $HVD_RANK = 7 ]; then echo seven; fi"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 11; ++rank) {
    const std::string d =
        dir_ / ("logs/rank." + std::string(rank < 10 ? "0" : "") + std::to_string(rank));
    struct stat st;
    EXPECT_EQ(stat((d + "/stdout").c_str(), &st), 0) << d;
    EXPECT_EQ(stat((d + "/stderr").c_str(), &st), 0) << d;
    EXPECT_EQ(ReadAll(d + "/stdout"), rank == 7 ? "seven\n" : "") << d;
  }
  struct stat st;
  EXPECT_NE(stat((dir_ / "logs/rank.7").c_str(), &st), 0);
}

TEST_F(HvdrunLocal, VerboseShowsProgressAndAddresses) {
  ProcResult r = Hvdrun({"-np", "2", "--verbose", "/bin/true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.err, "hvdrun: embedded launcher at 127.0.0.1:");
  EXPECT_HAS(r.err, "with 2 slot(s)");
  EXPECT_HAS(r.err, "SUCCEEDED");
  // The final state once (it was said twice), and a failure only by the failure summary.
  EXPECT_EQ(r.err.find("SUCCEEDED"), r.err.rfind("SUCCEEDED")) << r.err;
  r = Hvdrun({"-np", "1", "--verbose", "/bin/false"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.find("FAILED"), std::string::npos) << r.err;
  EXPECT_HAS(r.err, "failed: rank 0 on ");
}

// The embedded launcher's token is in a file only this user reads while the job runs (another
// shell can then ask about the job: --verbose prints the command), and gone after; so is one an
// hvdrun killed outright left.
TEST_F(HvdrunLocal, TheEmbeddedLaunchersTokenFileIsPrivateAndRemoved) {
  const std::string tmp = dir_.path() + "/tmp";
  ASSERT_EQ(mkdir(tmp.c_str(), 0700), 0);
  // One left by an hvdrun killed outright (pid 2^22 + 1: above any pid_max, so never running).
  const std::string dead = tmp + "/hvdrun-4194305-AbCdEf";
  ASSERT_EQ(mkdir(dead.c_str(), 0700), 0);
  WriteFile(dead + "/token", "0123");
  ProcResult r = RunProcess(
      Args({"-np", "1", "--verbose", "/bin/sh", "-c",
            "stat -c '%a' \"$TMPDIR\"/hvdrun-*/ \"$TMPDIR\"/hvdrun-*/token; "
            "cat \"$TMPDIR\"/hvdrun-*/token | wc -c"}),
      dir_.path(), kJobTimeout,
      {"HVD_LAUNCHER=", "HVD_TOKEN_FILE=", "XDG_RUNTIME_DIR=", "TMPDIR=" + tmp}, dir_.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:700\n[0]<stdout>:600\n[0]<stdout>:64\n");
  EXPECT_HAS(r.err, " --token-file " + tmp + "/hvdrun-");
  EXPECT_HAS(r.err, "/token status|logs|cancel JOB");
  EXPECT_TRUE(std::filesystem::is_empty(tmp)) << "the token's directory outlived hvdrun";
}

TEST_F(HvdrunLocal, SigintCancelsAndLeavesNoRank) {
  InterruptMidJob({"-np", "2", "/bin/sh", "-c", "echo $$ > pid.$HVD_RANK; exec sleep 100"}, SIGINT);
}

TEST_F(HvdrunLocal, SigtermCancelsAndLeavesNoRank) {
  // A rank that ignores SIGTERM must still go (SIGKILL after the grace).
  InterruptMidJob({"-np", "2", "/bin/sh", "-c",
                   "trap '' TERM; echo $$ > pid.$HVD_RANK; while :; do sleep 1; done"},
                  SIGTERM);
}

// Even a SIGKILLed hvdrun, which cannot cancel anything, takes its ranks with it (PDEATHSIG).
TEST_F(HvdrunLocal, SigkillOfHvdrunTakesTheRanksAlong) {
  Proc p(Args({"-np", "2", "/bin/sh", "-c", "echo $$ > pid.$HVD_RANK; exec sleep 100"}),
         dir_.path(), Env(), dir_.path());
  std::vector<pid_t> pids;
  for (int rank : {0, 1}) {
    pid_t pid = 0;
    for (int i = 0; i < 3000 && pid == 0; ++i) {  // bounded: 30 s
      const std::string s = ReadAll(dir_ / ("pid." + std::to_string(rank)));
      if (!s.empty() && s.back() == '\n') pid = std::atoi(s.c_str());
      if (pid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_GT(pid, 0) << p.Err();
    pids.push_back(pid);
  }
  p.Signal(SIGKILL);
  EXPECT_EQ(p.Wait(std::chrono::seconds(10)).signal, SIGKILL);
  for (int i = 0; i < 500 && (ProcessAlive(pids[0]) || ProcessAlive(pids[1])); ++i) {
    LiveChildren();  // reaps the ranks re-parented here
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (pid_t pid : pids) EXPECT_FALSE(ProcessAlive(pid)) << "rank process " << pid << " survived";
}

TEST_F(HvdrunLocal, ExampleTrainerTrainsOnFourRanks) {
#ifndef EXAMPLE_TRAIN_PATH
  GTEST_SKIP() << "examples/train is not part of this build";
#else
  ProcResult r = Hvdrun({"-np", "4", "--start-timeout", "30", EXAMPLE_TRAIN_PATH, "--steps", "100"},
                        std::chrono::seconds(120));
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:trained on 4 ranks");
#endif
}

}  // namespace
}  // namespace hvd::clitest
