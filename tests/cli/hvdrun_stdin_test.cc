// hvdrun's standard input reaches rank 0 (--stdin, as mpirun and horovodrun), end to end with the
// real hvdrun, locally and against a cluster (a Launcher and Agent hosted by this test): rank 0
// reads every line and then EOF, the other ranks read EOF at once, a few MB arrive intact, a fast
// producer is held back (bounded memory), the job's end does not wait for the input's, a restart
// attempt reads on where the failed one stopped, --stdin none and --stdin N.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <fstream>
#include <random>

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

// hvdrun with its stdin a pipe this test writes (Proc's hvdrun inherits the test's stdin).
class PipedHvdrun {
 public:
  PipedHvdrun(const std::vector<std::string>& args, const std::string& dir,
              const std::vector<std::string>& env) {
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
    const int saved = dup(0);
    dup2(fds[0], 0);  // Proc's child inherits fd 0 (dup2 clears close-on-exec)
    proc_ = std::make_unique<Proc>(args, dir, env, dir);
    dup2(saved, 0);
    close(saved);
    close(fds[0]);
    in_ = fds[1];
  }
  ~PipedHvdrun() { CloseInput(); }

  void Write(const std::string& s) { ASSERT_EQ(write(in_, s.data(), s.size()), (ssize_t)s.size()); }
  void CloseInput() {
    if (in_ >= 0) close(in_);
    in_ = -1;
  }
  int input_fd() const { return in_; }
  Proc& proc() { return *proc_; }
  // Waits (bounded) until hvdrun's stdout has `text`.
  bool WaitOut(const std::string& text, std::chrono::milliseconds limit = kTimeout) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      if (proc_->Out().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

 private:
  std::unique_ptr<Proc> proc_;
  int in_ = -1;
};

// Prints each line it reads with its rank, then "<rank> eof".
const std::string kEcho =
    "while read l; do echo \"$HVD_RANK got $l\"; done; echo \"$HVD_RANK eof\"";

class HvdrunStdin : public ::testing::Test {
 protected:
  void TearDown() override {
    if (cluster_) cluster_->Stop();
    EXPECT_EQ(Leftovers(), std::vector<std::string>{});
  }
  std::vector<std::string> Args(std::vector<std::string> args) {
    args.insert(args.begin(), HVDRUN_PATH);
    return args;
  }
  // Local mode, or the cluster once StartCluster() ran.
  std::vector<std::string> Env() {
    if (!cluster_) return {"HVD_LAUNCHER=", "HVD_TOKEN_FILE="};
    return {"HVD_LAUNCHER=" + cluster_->address(), "HVD_TOKEN_FILE=" + (dir_ / "token")};
  }
  void StartCluster() {
    Status s = StartTestCluster(2, HVD_AGENT_PATH, dir_ / "token", &cluster_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // `hvdrun ARGS < file` through a shell.
  ProcResult RunWithInputFile(const std::vector<std::string>& args, const std::string& file) {
    std::string cmd = "exec";
    for (const std::string& a : Args(args)) cmd += " '" + a + "'";
    cmd += " < '" + file + "'";
    return RunProcess({"/bin/sh", "-c", cmd}, dir_.path(), kTimeout, Env(), dir_.path());
  }

  void LinesToRankZeroAndEofToTheOthers() {
    PipedHvdrun p(Args({"-np", "2", "--start-timeout", "0", "sh", "-c", kEcho}), dir_.path(),
                  Env());
    p.Write("a\nb\n");
    // Rank 1 reads EOF while hvdrun's input is still open; rank 0 has both lines.
    ASSERT_TRUE(p.WaitOut("[1]<stdout>:1 eof\n")) << p.proc().Out() << p.proc().Err();
    ASSERT_TRUE(p.WaitOut("[0]<stdout>:0 got b\n")) << p.proc().Out() << p.proc().Err();
    EXPECT_EQ(p.proc().Out().find("0 eof"), std::string::npos);  // rank 0 waits for more
    p.CloseInput();
    ProcResult r = p.proc().Wait(kTimeout);
    ASSERT_FALSE(r.timed_out) << r.err;
    EXPECT_EQ(r.exit_code, 0) << r.err;
    // Rank 0's lines in order (other ranks' lines may come in between).
    const size_t a = r.out.find("[0]<stdout>:0 got a\n"), b = r.out.find("[0]<stdout>:0 got b\n"),
                 eof = r.out.find("[0]<stdout>:0 eof\n");
    EXPECT_TRUE(a != std::string::npos && b != std::string::npos && eof != std::string::npos &&
                a < b && b < eof)
        << r.out;
    EXPECT_EQ(r.out.find("1 got"), std::string::npos) << r.out;
  }

  void LargeInputArrivesIntact() {
    std::string data(4 << 20, '\0');
    std::mt19937 gen(7);
    for (char& c : data) c = static_cast<char>(gen());
    std::ofstream(dir_ / "big.bin", std::ios::binary) << data;
    const ProcResult expected =
        RunProcess({"/bin/sh", "-c", "cksum < big.bin"}, dir_.path(), kTimeout, {}, dir_.path());
    ASSERT_EQ(expected.exit_code, 0);
    ASSERT_NE(expected.out.find(std::to_string(data.size())), std::string::npos) << expected.out;
    ProcResult r = RunWithInputFile({"-np", "2", "--start-timeout", "0", "sh", "-c",
                                     "if [ $HVD_RANK = 0 ]; then cksum; else wc -c; fi"},
                                    dir_ / "big.bin");
    ASSERT_FALSE(r.timed_out) << r.err;
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_HAS(r.out, "[0]<stdout>:" + expected.out);  // checksum and length
    EXPECT_HAS(r.out, "[1]<stdout>:0\n");
  }

  TempDir dir_;
  std::unique_ptr<cli::EmbeddedCluster> cluster_;
};

TEST_F(HvdrunStdin, LocalLinesReachRankZeroOnly) {
  LinesToRankZeroAndEofToTheOthers();
}

TEST_F(HvdrunStdin, LocalLargeInputArrivesIntact) {
  LargeInputArrivesIntact();
}

TEST_F(HvdrunStdin, ClusterLinesReachRankZeroOnly) {
  StartCluster();
  LinesToRankZeroAndEofToTheOthers();
}

TEST_F(HvdrunStdin, ClusterLargeInputArrivesIntact) {
  StartCluster();
  LargeInputArrivesIntact();
}

// A rank that never reads, and an input that never ends: hvdrun takes only a bounded amount
// (the launcher's buffer, the pipes and gRPC's windows) and exits when the job ends.
TEST_F(HvdrunStdin, ProducerIsHeldBackAndTheJobEndDoesNotWaitForTheInput) {
  PipedHvdrun p(
      Args({"-np", "1", "--start-timeout", "0", "sh", "-c", "echo started; sleep 3; echo done"}),
      dir_.path(), Env());
  ASSERT_TRUE(p.WaitOut("[0]<stdout>:started\n")) << p.proc().Err();
  fcntl(p.input_fd(), F_SETFL, O_NONBLOCK);
  const std::string chunk(64 << 10, 'x');
  size_t accepted = 0;
  const auto until = Clock::now() + std::chrono::milliseconds(1500);
  while (Clock::now() < until) {
    const ssize_t n = write(p.input_fd(), chunk.data(), chunk.size());
    if (n > 0) {
      accepted += static_cast<size_t>(n);
    } else {
      pollfd pf{p.input_fd(), POLLOUT, 0};
      poll(&pf, 1, 50);
    }
  }
  // Unbounded buffering would take gigabytes in 1.5 s; hvd holds about 1 MiB plus windows.
  EXPECT_LT(accepted, size_t{64} << 20) << "hvdrun took " << accepted << " bytes";
  EXPECT_GT(accepted, size_t{64} << 10);                   // it did forward
  ProcResult r = p.proc().Wait(std::chrono::seconds(20));  // input still open
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:done\n");
  EXPECT_LT(r.seconds, 15) << r.err;
}

// A restarted attempt's rank 0 reads what comes after the failed attempt's: the input goes to the
// newest attempt, and hvdrun keeps forwarding across the restart.
TEST_F(HvdrunStdin, RestartAttemptReadsOn) {
  PipedHvdrun p(Args({"-np", "1", "--start-timeout", "0", "--max-restarts", "1", "sh", "-c",
                      "if [ $HVD_ATTEMPT = 0 ]; then read l; echo \"first got $l\"; exit 3; fi; "
                      "echo ready; " +
                          kEcho}),
                dir_.path(), Env());
  p.Write("a\n");
  ASSERT_TRUE(p.WaitOut("[0]<stdout>:first got a\n")) << p.proc().Err();
  ASSERT_TRUE(p.WaitOut("[0]<stdout>:ready\n")) << p.proc().Out() << p.proc().Err();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its agent opens the input
  p.Write("b\n");
  ASSERT_TRUE(p.WaitOut("[0]<stdout>:0 got b\n")) << p.proc().Out() << p.proc().Err();
  p.CloseInput();
  ProcResult r = p.proc().Wait(kTimeout);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:0 eof\n");
}

TEST_F(HvdrunStdin, StdinNoneAndAnotherRank) {
  WriteFile(dir_ / "in.txt", "a\n");
  ProcResult r = RunWithInputFile(
      {"-np", "2", "--stdin", "none", "--start-timeout", "0", "sh", "-c", kEcho}, dir_ / "in.txt");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:0 eof\n");
  EXPECT_EQ(r.out.find("got"), std::string::npos) << r.out;
  r = RunWithInputFile({"-np", "2", "--stdin", "1", "--start-timeout", "0", "sh", "-c", kEcho},
                       dir_ / "in.txt");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[1]<stdout>:1 got a\n");
  EXPECT_EQ(r.out.find("0 got"), std::string::npos) << r.out;
  r = RunWithInputFile({"-np", "2", "--stdin", "2", "true"}, dir_ / "in.txt");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "--stdin 2: give the rank that reads hvdrun's standard input (0 to 1)");
}

}  // namespace
}  // namespace hvd::clitest
