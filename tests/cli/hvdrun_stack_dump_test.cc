// A stalled rank's stacks, end to end (docs/reliability.md, "Where a stalled rank is"): the real
// hvdrun in local mode runs tests/cli/stack_dump_program.py, whose rank 1 stops taking part in
// a function of its own; the stall's report makes the launcher ask rank 1 (only: rank 0 waits in
// hvd) for its stacks, its agent signals the rank's process (not the child it forked, which
// inherits the handler), and Python's faulthandler writes them to rank 1's stderr, which hvdrun
// shows. And SIGQUIT to an attached hvdrun asks every rank, at any time; a C++ rank answers with
// its native stack. Nothing the job started outlives it. The Python tests skip when
// /usr/bin/python3 has no torch.
#include <gtest/gtest.h>

#include <signal.h>

#include <fstream>
#include <string>
#include <thread>

#include "testutil/expect.h"

#include "hvdrun_process.h"

namespace hvd::clitest {
namespace {

const std::string kProgram = std::string(HVD_SOURCE_DIR) + "/tests/cli/stack_dump_program.py";

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Polls `done` every 20 ms for up to `limit`.
template <typename F>
bool WaitUntil(F done, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

class HvdrunStackDump : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = TorchMissing(dir_.path()); !why.empty()) GTEST_SKIP() << why;
  }
  void TearDown() override { EXPECT_EQ(Leftovers(), std::vector<std::string>{}); }

  TempDir dir_;
};

TEST_F(HvdrunStackDump, AStalledPythonRankShowsWhereItIs) {
  ProcResult r =
      RunProcess({HVDRUN_PATH, "-np", "2", "--stall-check-time", "1", "--stall-timeout", "8",
                  "--kill-grace", "1", kTestPython, kProgram},
                 dir_.path(), std::chrono::seconds(90),
                 {"HVD_LAUNCHER=", "HVD_TOKEN_FILE=", std::string("PYTHONPATH=") + HVD_PYTHON_DIR},
                 dir_.path());
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string all = r.out + r.err;
  EXPECT_HAS(all, "rank 1 goes to load data");
  EXPECT_HAS(r.err, "stalled: ");
  // The launcher asked rank 1 once, and rank 1's stacks came out on its stderr: the function it
  // sits in, called from the program's top level.
  EXPECT_EQ(Count(all, "for its stacks"), 1u) << all;
  EXPECT_HAS(all, "asked rank 1 on ");
  EXPECT_HAS(all, "[1]<stderr>:");
  EXPECT_HAS(all, "stack_dump_program.py\", line ");
  EXPECT_HAS(all, " in stuck_in_the_data_loader");
  EXPECT_HAS(all, "in <module>");
  // Not rank 0 (it waits in hvd, the stall does not end at it), nor rank 1's forked child.
  EXPECT_EQ(all.find("[0]<stderr>:Current thread"), std::string::npos) << all;
  EXPECT_EQ(all.find("[0]<stderr>:Thread 0x"), std::string::npos) << all;
  EXPECT_EQ(all.find("forked_helper_waits"), std::string::npos) << all;
  // One dump, as it happened (the failure's stderr tail shows it again, not from a rank).
  EXPECT_EQ(Count(all, "<stderr>:Current thread 0x") + Count(all, "<stderr>:Thread 0x"), 1u) << all;
  // The child went with the job (Leftovers checks every process, this one by name).
  std::ifstream pid_file(dir_.path() + "/child.pid");
  int child = 0;
  ASSERT_TRUE(pid_file >> child) << "rank 1 wrote no child.pid";
  EXPECT_FALSE(ProcessAlive(child)) << "rank 1's child " << child << " outlived the job";
}

// Ranks that submit collectives in different orders wait on each other: the job's cause says so,
// naming both keys, not only the one rank the oldest key waits for.
TEST_F(HvdrunStackDump, RanksWaitingOnEachOtherAreNamedAsSuch) {
  ProcResult r =
      RunProcess({HVDRUN_PATH, "-np", "2", "--stall-check-time", "1", "--stall-timeout", "4",
                  "--kill-grace", "1", kTestPython, kProgram, "--crossed"},
                 dir_.path(), std::chrono::seconds(90),
                 {"HVD_LAUNCHER=", "HVD_TOKEN_FILE=", std::string("PYTHONPATH=") + HVD_PYTHON_DIR},
                 dir_.path());
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const size_t failed = r.err.find(" failed: stalled for ");
  ASSERT_NE(failed, std::string::npos) << r.err;
  const std::string cause = r.err.substr(failed);
  EXPECT_HAS(cause, "has not submitted allreduce 'allreduce.");
  EXPECT_HAS(cause, "has submitted allreduce 'allreduce.");
  EXPECT_HAS(cause, ": the ranks wait on each other (they submit collectives in different orders");
}

// SIGQUIT (Ctrl-\) to an attached hvdrun asks every rank for its stacks, and the job goes on: a
// thread dump on demand, as a JVM gives one, before any stall check would.
TEST_F(HvdrunStackDump, SigquitShowsEveryRanksStacksAndTheJobGoesOn) {
  Proc p({HVDRUN_PATH, "-np", "2", kTestPython, kProgram, "--loop"}, dir_.path(),
         {"HVD_LAUNCHER=", "HVD_TOKEN_FILE=", std::string("PYTHONPATH=") + HVD_PYTHON_DIR},
         dir_.path());
  ASSERT_TRUE(WaitUntil(
      [&] {
        const std::string out = p.Out();
        return out.find("[0]<stdout>:rank 0 looping") != std::string::npos &&
               out.find("[1]<stdout>:rank 1 looping") != std::string::npos;
      },
      std::chrono::seconds(60)))
      << p.Out() << p.Err();
  p.Signal(SIGQUIT);
  // Both ranks' stacks, each showing the loop it is in.
  const auto dumped = [&](int rank) {
    const std::string all = p.Out() + p.Err(), tag = "[" + std::to_string(rank) + "]<stderr>:";
    return all.find(tag + "Current thread 0x") != std::string::npos &&
           all.find(tag + "  File \"" + kProgram + "\", line ") != std::string::npos;
  };
  EXPECT_TRUE(WaitUntil([&] { return dumped(0) && dumped(1); }, std::chrono::seconds(30)))
      << p.Out() << p.Err();
  { std::ofstream(dir_.path() + "/stop") << "\n"; }
  ProcResult r = p.Wait(std::chrono::seconds(60));
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string all = r.out + r.err;
  EXPECT_HAS(all, "hvdrun: asked ranks 0, 1 for their stacks");
  EXPECT_HAS(all, " in training_step_loop");
  EXPECT_EQ(all.find("cancelling"), std::string::npos) << "SIGQUIT is no stop: " << all;
}

// A C++ rank (examples/train.cc) answers too, with its main thread's native stack
// (runtime/stall/native_stacks.h): SIGQUIT while it trains, then the job is stopped.
class HvdrunNativeStackDump : public ::testing::Test {
 protected:
  void TearDown() override { EXPECT_EQ(Leftovers(), std::vector<std::string>{}); }

  TempDir dir_;
};

TEST_F(HvdrunNativeStackDump, SigquitShowsACppRanksNativeStackAndTheJobGoesOn) {
  Proc p({HVDRUN_PATH, "-np", "2", EXAMPLE_TRAIN_PATH, "--steps", "100000000"}, dir_.path(),
         {"HVD_LAUNCHER=", "HVD_TOKEN_FILE="}, dir_.path());
  ASSERT_TRUE(
      WaitUntil([&] { return p.Out().find("[0]<stdout>:step 0 loss") != std::string::npos; },
                std::chrono::seconds(60)))
      << p.Out() << p.Err();
  p.Signal(SIGQUIT);
  const auto dumped = [&](int rank) {
    const std::string all = p.Out() + p.Err(), tag = "[" + std::to_string(rank) + "]<stderr>:";
    return all.find(tag + "hvd: native stack of rank " + std::to_string(rank) + " (pid ") !=
               std::string::npos &&
           all.find(tag + "hvd: the process's threads") != std::string::npos;
  };
  EXPECT_TRUE(WaitUntil([&] { return dumped(0) && dumped(1); }, std::chrono::seconds(30)))
      << p.Out() << p.Err();
  // The frames name the example's binary; the job still trains afterwards.
  const std::string all = p.Out() + p.Err();
  EXPECT_HAS(all, "<stderr>:" + std::string(EXAMPLE_TRAIN_PATH) + "(");
  const size_t steps_before = Count(p.Out(), "<stdout>:step ");
  EXPECT_TRUE(WaitUntil([&] { return Count(p.Out(), "<stdout>:step ") > steps_before; },
                        std::chrono::seconds(30)))
      << p.Out();
  p.Signal(SIGTERM);
  ProcResult r = p.Wait(std::chrono::seconds(60));
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out + r.err, "hvdrun: asked ranks 0, 1 for their stacks");
}

}  // namespace
}  // namespace hvd::clitest
