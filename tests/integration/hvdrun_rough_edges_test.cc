// What a new user hit in the first minutes with hvdrun (issue 16, "fixes from the trial"), end to
// end through the built binaries: Ctrl-C reaching the ranks as SIGINT, a second Ctrl-C that stops
// at once, a stall said once, hvd-launcherd's generated token removed on exit, the HTTP port
// given for the gRPC one, mistyped subcommands and flags, `hvdrun ddp.py`, `-H localhost` in
// cluster mode, and output faster than hvdrun takes it. Every test proves that nothing it started
// survives (the test is the subreaper).
#include <gtest/gtest.h>

#include <unistd.h>
#include <thread>

#include <regex>
#include <sstream>

#include "cli/embedded.h"
#include "cli/hvdrun_process.h"
#include "cli/test_cluster.h"
#include "testutil/expect.h"

namespace hvd::clitest {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr auto kTimeout = seconds(60);

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Polls `done` every 10 ms for up to `limit`.
template <typename F>
bool WaitUntil(F done, milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

class HvdrunRoughEdges : public ::testing::Test {
 protected:
  std::vector<std::string> Args(std::vector<std::string> args) {
    args.insert(args.begin(), HVDRUN_PATH);
    return args;
  }
  // Local mode: no launcher from the environment.
  std::vector<std::string> Env() const { return {"HVD_LAUNCHER=", "HVD_TOKEN_FILE="}; }
  ProcResult Hvdrun(const std::vector<std::string>& args, milliseconds timeout = kTimeout) {
    return RunProcess(Args(args), dir_.path(), timeout, Env(), dir_.path());
  }
  std::unique_ptr<Proc> Start(const std::vector<std::string>& args) {
    return std::make_unique<Proc>(Args(args), dir_.path(), Env(), dir_.path());
  }
  // The pid each of `ranks` ranks wrote to pid.RANK (bounded wait).
  std::vector<pid_t> RankPids(Proc* p, int ranks) {
    std::vector<pid_t> pids;
    for (int rank = 0; rank < ranks; ++rank) {
      pid_t pid = 0;
      WaitUntil(
          [&] {
            const std::string s = ReadAll(dir_ / ("pid." + std::to_string(rank)));
            if (!s.empty() && s.back() == '\n') pid = std::atoi(s.c_str());
            return pid > 0;
          },
          seconds(30));
      EXPECT_GT(pid, 0) << "rank " << rank << " never started: " << p->Err();
      pids.push_back(pid);
    }
    return pids;
  }
  void TearDown() override { EXPECT_EQ(Leftovers(), std::vector<std::string>{}); }

  TempDir dir_;
};

// 1. As under torchrun/mpirun, where a terminal's Ctrl-C reaches every worker as SIGINT: the
// first signal hvdrun gets is the first its ranks get, so `except KeyboardInterrupt:` runs.
TEST_F(HvdrunRoughEdges, RanksGetTheSignalHvdrunGot) {
  for (int sig : {SIGINT, SIGHUP}) {
    SCOPED_TRACE(strsignal(sig));
    for (int rank : {0, 1}) unlink((dir_ / ("pid." + std::to_string(rank))).c_str());
    std::unique_ptr<Proc> p =
        Start({"-np", "2", "/bin/sh", "-c",
               "for s in INT TERM HUP; do trap \"echo rank $HVD_RANK got SIG$s; exit 3\" $s; done; "
               "echo $$ > pid.$HVD_RANK; while :; do sleep 0.05; done"});
    std::vector<pid_t> pids = RankPids(p.get(), 2);
    ASSERT_EQ(pids.size(), 2u);
    p->Signal(sig);
    ProcResult r = p->Wait(seconds(20));
    ASSERT_FALSE(r.timed_out) << r.err;
    EXPECT_EQ(r.exit_code, 128 + sig) << r.err;
    const std::string name = sig == SIGINT ? "SIGINT" : "SIGHUP";
    EXPECT_HAS(r.out, "[0]<stdout>:rank 0 got " + name);
    EXPECT_HAS(r.out, "[1]<stdout>:rank 1 got " + name);
    EXPECT_EQ(r.out.find("got SIGTERM"), std::string::npos) << r.out;
    for (pid_t pid : pids) EXPECT_FALSE(ProcessAlive(pid)) << "rank " << pid << " survived";
  }
}

// 2. A second Ctrl-C stops waiting at once: the ranks (which ignore SIGINT and SIGTERM) are
// SIGKILLed now, not after the 5 s kill grace.
TEST_F(HvdrunRoughEdges, SecondSignalKillsTheRanksAtOnce) {
  std::unique_ptr<Proc> p =
      Start({"-np", "2", "/bin/sh", "-c",
             "trap '' INT TERM; echo $$ > pid.$HVD_RANK; while :; do sleep 0.05; done"});
  std::vector<pid_t> pids = RankPids(p.get(), 2);
  ASSERT_EQ(pids.size(), 2u);
  p->Signal(SIGINT);
  ASSERT_TRUE(
      WaitUntil([&] { return p->Err().find("cancelling job") != std::string::npos; }, seconds(10)))
      << p->Err();
  std::this_thread::sleep_for(milliseconds(200));  // the first signal is well under way
  const auto second = Clock::now();
  p->Signal(SIGINT);
  ProcResult r = p->Wait(seconds(20));
  const double after = std::chrono::duration<double>(Clock::now() - second).count();
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.err;
  // Without the second signal the kill grace would end about 4.8 s from here; a loaded machine
  // may take a second or two to kill, reap and tear down the embedded daemons.
  EXPECT_LT(after, 3.0) << "hvdrun took " << after << " s after the second signal: " << r.err;
  EXPECT_HAS(r.err, "second signal: stopping its ranks now");
  EXPECT_EQ(r.err.find("did not end in time"), std::string::npos) << r.err;
  for (pid_t pid : pids) EXPECT_FALSE(ProcessAlive(pid)) << "rank " << pid << " survived";
}

// 3. In local mode hvdrun reports a stall, once: not also the embedded launcher's WARNING log
// line, nor again each time the stall grows a second older; and shows what the stalled rank last
// wrote to stderr, as it shows an exited rank's.
TEST_F(HvdrunRoughEdges, AStallIsReportedOnceByHvdrun) {
  std::unique_ptr<Proc> p =
      Start({"-np", "2", "--stall-check-time", "1", "--stall-timeout", "3", "/bin/sh", "-c",
             "echo $$ > pid.$HVD_RANK; echo \"rank $HVD_RANK said this on stderr\" >&2; "
             "exec stdbuf -oL " EXAMPLE_TRAIN_PATH " --steps 100000000"});
  std::vector<pid_t> pids = RankPids(p.get(), 2);
  ASSERT_EQ(pids.size(), 2u);
  // Both ranks past hvd::Init, in the training loop: rank 0 reports steps (line-buffered by
  // stdbuf, though its stdout is a pipe), which needs rank 1's part of every allreduce.
  ASSERT_TRUE(
      WaitUntil([&] { return p->Out().find("<stdout>:step ") != std::string::npos; }, seconds(30)))
      << "rank 0 reported no step: " << p->Out() << p->Err();
  ASSERT_EQ(kill(pids[1], SIGSTOP), 0);
  ProcResult r = p->Wait(seconds(30));
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_HAS(r.err, "stalled: rank 1 on ");
  EXPECT_EQ(Count(r.err, "stalled: "), 1u) << r.err;
  EXPECT_EQ(r.err.find("job_supervision"), std::string::npos) << "a daemon's log line: " << r.err;
  EXPECT_HAS(r.err, "(--stall-timeout 3 s)");
  EXPECT_HAS(r.err, "last stderr lines of rank 1:\n");
  EXPECT_HAS(r.err, "  rank 1 said this on stderr");  // the tail's line, not the live one
}

// 4 and 5. hvd-launcherd without --token-file/--state-dir removes the token directory it made when
// it exits; and hvdrun given its HTTP port says so and names the gRPC one.
TEST_F(HvdrunRoughEdges, LauncherdRemovesItsTokenDirAndHvdrunNamesTheHttpPort) {
  Proc d({HVD_LAUNCHERD_PATH, "--listen", "127.0.0.1:0", "--rendezvous-listen", "127.0.0.1:0",
          "--http", "127.0.0.1:0"},
         dir_.path(), {"HVD_TOKEN_FILE="}, dir_.path());
  std::smatch m;
  std::string out;
  const std::regex started(
      "gRPC (127\\.0\\.0\\.1:[0-9]+),.*HTTP (127\\.0\\.0\\.1:[0-9]+), token (\\S+)");
  ASSERT_TRUE(WaitUntil(
      [&] {
        out = d.Out();
        return std::regex_search(out, m, started) || !ProcessAlive(d.pid());
      },
      seconds(20)))
      << out << d.Err();
  ASSERT_TRUE(std::regex_search(out, m, started)) << out << d.Err();
  const std::string http = m[2], token = m[3];
  const std::string token_dir = token.substr(0, token.rfind('/'));
  EXPECT_EQ(token_dir.rfind("/tmp/hvd-launcherd-", 0), 0u) << token;
  EXPECT_EQ(access(token.c_str(), R_OK), 0) << token;

  ProcResult r = RunProcess(Args({"--launcher", http, "--token-file", token, "list"}), dir_.path(),
                            seconds(30), {}, dir_.path());
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_HAS(r.err, "probably the launcher's --http (REST) port");
  EXPECT_HAS(r.err, "gRPC port");

  d.Signal(SIGTERM);
  ProcResult dr = d.Wait(seconds(20));
  ASSERT_FALSE(dr.timed_out) << dr.err;
  EXPECT_EQ(dr.exit_code, 0) << dr.err;
  EXPECT_NE(access(token_dir.c_str(), F_OK), 0) << token_dir << " was left behind";
}

// 6. Mistyped subcommands are not taken for programs, and unknown flags name the nearest known.
TEST_F(HvdrunRoughEdges, MistypedSubcommandsAndFlagsNameTheNearest) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"stats"}, "unknown subcommand 'stats'; did you mean 'status'?"},
      {{"jobs"}, "unknown subcommand 'jobs'; did you mean 'list'?"},
      {{"--launcher", "127.0.0.1:1", "lst"}, "unknown subcommand 'lst'; did you mean 'list'?"},
      {{"no-such-program-xyz"}, "unknown subcommand 'no-such-program-xyz' (subcommands: submit"},
      {{"--np", "2", "/bin/true"}, "unknown flag --np; did you mean -np?"},
      {{"-n", "2", "/bin/true"}, "unknown flag -n; did you mean -np?"},
      {{"--fusion-threshold", "2", "-np", "1", "/bin/true"},
       "unknown flag --fusion-threshold; did you mean --fusion-threshold-mb?"},
      {{"--timeline", "t.json", "-np", "1", "/bin/true"},
       "unknown flag --timeline; did you mean --timeline-filename?"},
  };
  for (const auto& [args, want] : cases) {
    ProcResult r = Hvdrun(args, seconds(20));
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.err;
    EXPECT_HAS(r.err, want);
    EXPECT_EQ(r.err.find("-np N is required"), std::string::npos) << r.err;
  }
  ProcResult r = Hvdrun({"stats"});
  EXPECT_HAS(r.err, "to run a program: hvdrun -np N PROGRAM");
  // A program that exists is still run mode's: it asks for -np.
  r = Hvdrun({"true"});
  EXPECT_HAS(r.err, "-np N is required");
}

// 7. torchrun runs `ddp.py` itself; hvdrun says to name the interpreter.
TEST_F(HvdrunRoughEdges, APythonScriptGivenAsTheProgramGetsAHint) {
  WriteFile(dir_ / "ddp.py", "print('hi')\n", 0644);
  ProcResult r = Hvdrun({"--nproc-per-node", "2", "ddp.py"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "command not found");
  EXPECT_HAS(r.err, "hvdrun ... python3 ddp.py");
  r = Hvdrun({"-np", "2", "./ddp.py"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "Permission denied");
  EXPECT_HAS(r.err, "hvdrun ... python3 ./ddp.py");
  // Given as the hint says, it runs.
  r = Hvdrun({"-np", "2", "/usr/bin/python3", "ddp.py"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[1]<stdout>:hi");
}

// 8. Cluster mode: `-H localhost:2` means this host, whose agent registered under its host name.
TEST_F(HvdrunRoughEdges, LocalhostInClusterModeIsThisHostsName) {
  std::unique_ptr<cli::EmbeddedCluster> cluster;
  Status s = StartTestCluster(2, HVD_AGENT_PATH, dir_ / "token", &cluster);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ProcResult r = RunProcess(
      Args({"--launcher", cluster->address(), "--token-file", dir_ / "token", "--verbose", "-H",
            "localhost:2", "-np", "2", "/bin/sh", "-c", "echo hi from $HVD_RANK"}),
      dir_.path(), seconds(20), {}, dir_.path());
  cluster->Stop();
  ASSERT_FALSE(r.timed_out) << "the job waited for an agent named localhost: " << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[1]<stdout>:hi from 1");
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_HAS(r.err, std::string("-H localhost is this host: submitted as ") + host);
}

// ... and so does `hvdrun submit`, whose detached job then runs on this host's agent.
TEST_F(HvdrunRoughEdges, SubmitRenamesLocalhostToo) {
  std::unique_ptr<cli::EmbeddedCluster> cluster;
  Status s = StartTestCluster(2, HVD_AGENT_PATH, dir_ / "token", &cluster);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ProcResult r = RunProcess(Args({"submit", "--launcher", cluster->address(), "--token-file",
                                  dir_ / "token", "-H", "localhost:2", "-np", "2", "/bin/true"}),
                            dir_.path(), seconds(20), {}, dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out;
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  ProcResult st;
  for (int i = 0; i < 100; ++i) {  // bounded: 100 x 100 ms
    st = RunProcess(
        Args({"status", "--launcher", cluster->address(), "--token-file", dir_ / "token", id}),
        dir_.path(), seconds(10), {}, dir_.path());
    if (st.out.find("SUCCEEDED") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  cluster->Stop();
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_HAS(r.err, std::string("-H localhost is this host: submitted as ") + host);
  EXPECT_HAS(st.out, "SUCCEEDED");
}

// 10. In local mode, a discovery script that names another host is named as the source (the
// error blamed -H, which was not given).
TEST_F(HvdrunRoughEdges, ADiscoveryScriptNamingAnotherHostIsNamedNotDashH) {
  WriteFile(dir_ / "d.sh", "#!/bin/sh\necho otherhost:2\n", 0755);
  ProcResult r = Hvdrun({"-np", "1", "--min-np", "1", "--max-np", "2", "--host-discovery-script",
                         "./d.sh", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err,
             "--host-discovery-script ./d.sh's output names otherhost, but without "
             "--launcher every rank runs on this host");
}

// 9. Ranks that write faster than hvdrun takes their lines: every line is shown or counted as
// dropped on stderr (the launcher keeps a job's newest 100000 lines; a watcher that falls further
// behind loses the older ones). They were lost silently: only --verbose said so, without a count.
TEST_F(HvdrunRoughEdges, OutputThatOutrunsHvdrunIsShownOrCounted) {
  constexpr int kRanks = 2, kLines = 300000;
  ProcResult r =
      Hvdrun({"-np", std::to_string(kRanks), "/bin/sh", "-c", "seq " + std::to_string(kLines)});
  ASSERT_EQ(r.exit_code, 0) << r.err.substr(0, 2000);
  long shown = 0, dropped = 0;
  std::istringstream out(r.out);
  for (std::string line; std::getline(out, line);) {
    const size_t at = line.find("[hvd-agent: ");  // lines the agent itself could not keep
    if (at != std::string::npos) {
      dropped += std::atol(line.c_str() + at + 12);
    } else if (line.find("<stdout>:") != std::string::npos) {
      ++shown;
    }
  }
  const std::regex said(
      "hvdrun: ([0-9]+) lines? of job [0-9a-f]+'s output dropped before "
      "reaching this client");
  for (std::sregex_iterator it(r.err.begin(), r.err.end(), said), end; it != end; ++it) {
    dropped += std::atol((*it)[1].str().c_str());
  }
  EXPECT_EQ(shown + dropped, long{kRanks} * kLines)
      << shown << " lines shown, " << dropped << " said dropped; stderr: " << r.err.substr(0, 2000);
}

}  // namespace
}  // namespace hvd::clitest
