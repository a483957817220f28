// RankRunner against real processes: argv verbatim, environment, working directory, output
// forwarding, exit reports, exec failures, stopping whole process groups and PDEATHSIG. Every test
// checks that no child of the test is left behind.
#include "agent/rank_runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace hvd::agent {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Whether `pid` is a live process (a zombie counts as gone: it runs nothing).
bool ProcessAlive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  if (!std::getline(stat, content)) return false;
  const auto paren = content.rfind(')');
  if (paren == std::string::npos || paren + 2 >= content.size()) return false;
  const char state = content[paren + 2];
  return state != 'Z' && state != 'X';
}

bool WaitGone(int pid, milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  while (ProcessAlive(pid)) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

// Collects a runner's callbacks.
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  int started_pid = 0;
  std::vector<std::pair<bool, std::string>> lines;  // (is_stderr, text)
  std::optional<RankExit> exit;
  bool output_after_exit = false;

  RankRunnerOptions Options(std::vector<std::string> argv) {
    RankRunnerOptions o;
    o.argv = std::move(argv);
    o.wrapper = HVD_AGENT_PATH;
    o.on_started = [this](int pid, int) {
      std::lock_guard<std::mutex> l(mu);
      started_pid = pid;
    };
    o.on_output = [this](bool is_stderr, std::string line) {
      std::lock_guard<std::mutex> l(mu);
      if (exit) output_after_exit = true;
      lines.emplace_back(is_stderr, std::move(line));
      cv.notify_all();
    };
    o.on_exit = [this](const RankExit& e) {
      std::lock_guard<std::mutex> l(mu);
      exit = e;
      cv.notify_all();
    };
    return o;
  }
  std::vector<std::string> Stream(bool is_stderr) {
    std::lock_guard<std::mutex> l(mu);
    std::vector<std::string> out;
    for (const auto& [err, text] : lines) {
      if (err == is_stderr) out.push_back(text);
    }
    return out;
  }
  // Waits until some line satisfies `pred`; returns it ("" on timeout).
  std::string WaitLine(const std::function<bool(const std::string&)>& pred) {
    std::unique_lock<std::mutex> l(mu);
    std::string found;
    cv.wait_for(l, std::chrono::seconds(10), [&] {
      for (const auto& [err, text] : lines) {
        if (pred(text)) {
          found = text;
          return true;
        }
      }
      return false;
    });
    return found;
  }
  RankExit WaitExit() {
    std::unique_lock<std::mutex> l(mu);
    EXPECT_TRUE(cv.wait_for(l, std::chrono::seconds(10), [&] { return exit.has_value(); }));
    return exit.value_or(RankExit{});
  }
};

class RankRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hvd_rank_runner_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    // Every process a test started has been reaped: the test process has no child left.
    errno = 0;
    EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
    EXPECT_EQ(errno, ECHILD);
    (void)std::system(("rm -rf " + dir_).c_str());
  }
  // Runs argv to completion and returns its exit report.
  RankExit Run(Collector& c, RankRunnerOptions o) {
    std::unique_ptr<RankRunner> r;
    Status s = RankRunner::Start(std::move(o), &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return {};
    EXPECT_TRUE(r->WaitDone(std::chrono::seconds(10)));
    return c.WaitExit();
  }
  std::string dir_;
};

TEST_F(RankRunnerTest, ArgvArrivesVerbatimWithoutShellExpansion) {
  Collector c;
  const std::vector<std::string> args = {"a b", "\"double\"", "'single'", "$HOME",
                                         "*",   "",           "x;y|z"};
  std::vector<std::string> argv = {"/bin/sh", "-c",
                                   "for a in \"$@\"; do printf '[%s]\\n' \"$a\"; done", "sh"};
  argv.insert(argv.end(), args.begin(), args.end());
  RankExit e = Run(c, c.Options(argv));
  EXPECT_EQ(e.exit_code, 0);
  std::vector<std::string> want;
  for (const auto& a : args) want.push_back("[" + a + "]");
  EXPECT_EQ(c.Stream(false), want);
  EXPECT_GT(c.started_pid, 0);
  EXPECT_EQ(c.started_pid, e.pid);
}

TEST_F(RankRunnerTest, EnvironmentIsTheAgentsPlusOverridesAndWorkingDirIsApplied) {
  setenv("HVD_RUNNER_TEST_INHERITED", "from agent", 1);
  setenv("HVD_RUNNER_TEST_OVERRIDDEN", "old", 1);
  Collector c;
  RankRunnerOptions o = c.Options(
      {"/bin/sh", "-c",
       "echo \"$HVD_RUNNER_TEST_INHERITED|$HVD_RUNNER_TEST_OVERRIDDEN|$HVD_RUNNER_TEST_NEW\"; pwd; "
       "cat; echo stdin-done"});
  o.env = {{"HVD_RUNNER_TEST_OVERRIDDEN", "new"}, {"HVD_RUNNER_TEST_NEW", "a b=c"}};
  o.working_dir = dir_;
  RankExit e = Run(c, std::move(o));
  unsetenv("HVD_RUNNER_TEST_INHERITED");
  unsetenv("HVD_RUNNER_TEST_OVERRIDDEN");
  EXPECT_EQ(e.exit_code, 0);
  // stdin is /dev/null: `cat` ends at once instead of waiting on the agent's terminal.
  EXPECT_EQ(c.Stream(false),
            (std::vector<std::string>{"from agent|new|a b=c", dir_, "stdin-done"}));
}

// The agent blocks SIGTERM (main() takes it with sigwait) and the process may ignore SIGPIPE;
// neither may reach the worker.
TEST_F(RankRunnerTest, WorkerStartsWithNoBlockedOrIgnoredSignals) {
  sigset_t term, old_mask;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, &old_mask), 0);
  struct sigaction ignore {
  }, old_pipe{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGPIPE, &ignore, &old_pipe), 0);
  Collector c;
  RankExit e = Run(c, c.Options({"/bin/grep", "-E", "^(SigBlk|SigIgn)", "/proc/self/status"}));
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(c.Stream(false),
            (std::vector<std::string>{"SigBlk:\t0000000000000000", "SigIgn:\t0000000000000000"}));
}

TEST_F(RankRunnerTest, ProgramNameIsLookedUpInTheWorkersPath) {
  std::ofstream(dir_ + "/hvd-test-prog") << "#!/bin/sh\necho found me\n";
  ASSERT_EQ(chmod((dir_ + "/hvd-test-prog").c_str(), 0755), 0);
  Collector c;
  RankRunnerOptions o = c.Options({"hvd-test-prog"});
  o.env = {{"PATH", "/nonexistent:" + dir_ + ":/usr/bin:/bin"}};
  RankExit e = Run(c, std::move(o));
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(c.Stream(false), std::vector<std::string>{"found me"});
}

TEST_F(RankRunnerTest, OutputLinesKeepTheirOrderAndStream) {
  Collector c;
  RankExit e = Run(c, c.Options({"/bin/sh", "-c",
                                 "i=0; while [ $i -lt 2000 ]; do echo out$i; echo err$i >&2; "
                                 "i=$((i+1)); done; printf 'partial'"}));
  EXPECT_EQ(e.exit_code, 0);
  std::vector<std::string> out = c.Stream(false), err = c.Stream(true);
  ASSERT_EQ(out.size(), 2001u);
  ASSERT_EQ(err.size(), 2000u);
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(out[i], "out" + std::to_string(i));
    ASSERT_EQ(err[i], "err" + std::to_string(i));
  }
  EXPECT_EQ(out.back(), "partial");   // a last line without newline is still delivered
  EXPECT_FALSE(c.output_after_exit);  // the exit report comes after the last line
}

TEST_F(RankRunnerTest, LongLinesAreCappedAndBinaryBecomesValidUtf8) {
  Collector c;
  RankRunnerOptions o = c.Options(
      {"/bin/sh", "-c",
       "head -c 100000 /dev/zero | tr '\\0' x; echo; printf 'bin\\377\\376\\000z\\n'; echo after"});
  o.max_line_bytes = 1000;
  RankExit e = Run(c, std::move(o));
  EXPECT_EQ(e.exit_code, 0);
  std::vector<std::string> out = c.Stream(false);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], std::string(1000, 'x') + "... [hvd: line truncated, 99000 bytes dropped]");
  EXPECT_EQ(out[1], std::string("bin\xEF\xBF\xBD\xEF\xBF\xBD\0z", 11));
  EXPECT_EQ(out[2], "after");
}

TEST_F(RankRunnerTest, ReportsExitCodeAndStderrTail) {
  Collector c;
  RankExit e = Run(c, c.Options({"/bin/sh", "-c",
                                 "i=1; while [ $i -le 30 ]; do echo e$i >&2; i=$((i+1)); done; "
                                 "exit 3"}));
  EXPECT_EQ(e.exit_code, 3);
  EXPECT_EQ(e.signal, 0);
  EXPECT_FALSE(e.stopped);
  std::string want;
  for (int i = 11; i <= 30; ++i) {
    if (i > 11) want += '\n';
    want += 'e';
    want += std::to_string(i);
  }
  EXPECT_EQ(e.stderr_tail, want);
}

TEST_F(RankRunnerTest, ReportsTheSignalThatEndedIt) {
  Collector c;
  RankExit e = Run(c, c.Options({"/bin/sh", "-c", "kill -USR1 $$"}));
  EXPECT_EQ(e.signal, SIGUSR1);
  EXPECT_FALSE(e.stopped);
}

// Exec failures come back from Start, at once, naming the path and the system's text.
TEST_F(RankRunnerTest, ExecFailuresNameThePathAndError) {
  std::ofstream(dir_ + "/not-executable") << "#!/bin/sh\n";
  struct Case {
    std::vector<std::string> argv;
    std::string working_dir;
    std::string want;
  } cases[] = {
      {{"./trian", "--lr", "0.1"}, dir_, "exec ./trian: No such file or directory"},
      {{"./not-executable"}, dir_, "exec ./not-executable: Permission denied"},
      {{"hvd-no-such-program-anywhere"},
       "",
       "exec hvd-no-such-program-anywhere: No such file or directory (searched PATH="},
      {{"/bin/true"},
       "/nonexistent-hvd-dir",
       "chdir /nonexistent-hvd-dir: No such file or directory"},
  };
  for (const Case& tc : cases) {
    Collector c;
    RankRunnerOptions o = c.Options(tc.argv);
    o.working_dir = tc.working_dir;
    std::unique_ptr<RankRunner> r;
    const auto t0 = Clock::now();
    Status s = RankRunner::Start(std::move(o), &r);
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(1));
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    EXPECT_NE(s.message().find(tc.want), std::string::npos) << s.message();
    EXPECT_EQ(r, nullptr);
    EXPECT_EQ(c.started_pid, 0);  // no callback for a rank that never ran
  }
  Status s = RankRunner::Start(RankRunnerOptions{}, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

// Stop reaches the whole process group: the shell and the sleep it put in the background.
TEST_F(RankRunnerTest, StopKillsTheWholeGroupIncludingGrandchildren) {
  Collector c;
  std::unique_ptr<RankRunner> r;
  ASSERT_TRUE(
      RankRunner::Start(c.Options({"/bin/sh", "-c", "sleep 100 & echo bg=$!; sleep 100"}), &r)
          .ok());
  const std::string line = c.WaitLine([](const std::string& l) { return l.rfind("bg=", 0) == 0; });
  ASSERT_FALSE(line.empty());
  const int grandchild = std::stoi(line.substr(3));
  ASSERT_TRUE(ProcessAlive(grandchild));
  const auto t0 = Clock::now();
  r->Stop(std::chrono::seconds(5));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));  // SIGTERM sufficed
  RankExit e = c.WaitExit();
  EXPECT_TRUE(e.stopped);
  EXPECT_EQ(e.signal, SIGTERM);
  EXPECT_TRUE(WaitGone(grandchild, milliseconds(2000)));
  EXPECT_FALSE(ProcessAlive(e.pid));
}

TEST_F(RankRunnerTest, IgnoredSigtermIsFollowedBySigkillAfterTheGrace) {
  Collector c;
  std::unique_ptr<RankRunner> r;
  ASSERT_TRUE(
      RankRunner::Start(
          c.Options({"/bin/sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"}), &r)
          .ok());
  ASSERT_EQ(c.WaitLine([](const std::string& l) { return l == "ready"; }), "ready");
  const auto t0 = Clock::now();
  r->Stop(milliseconds(300));
  const auto took = Clock::now() - t0;
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, std::chrono::seconds(3));
  RankExit e = c.WaitExit();
  EXPECT_TRUE(e.stopped);
  EXPECT_EQ(e.signal, SIGKILL);
}

// A rank is done when its process exits: what it left running in its group is killed, and a
// background process holding the output pipe does not delay the report.
TEST_F(RankRunnerTest, LeftoversInTheGroupDieWithTheRank) {
  Collector c;
  std::unique_ptr<RankRunner> r;
  ASSERT_TRUE(
      RankRunner::Start(c.Options({"/bin/sh", "-c", "sleep 100 & echo bg=$!; exit 4"}), &r).ok());
  const auto t0 = Clock::now();
  ASSERT_TRUE(r->WaitDone(std::chrono::seconds(5)));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  RankExit e = c.WaitExit();
  EXPECT_EQ(e.exit_code, 4);
  std::vector<std::string> out = c.Stream(false);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(WaitGone(std::stoi(out[0].substr(3)), milliseconds(2000)));
}

TEST_F(RankRunnerTest, DestroyingARunnerKillsItsWorker) {
  Collector c;
  std::unique_ptr<RankRunner> r;
  ASSERT_TRUE(RankRunner::Start(c.Options({"/bin/sleep", "100"}), &r).ok());
  const int pid = r->pid();
  r.reset();
  EXPECT_FALSE(ProcessAlive(pid));
  EXPECT_EQ(c.WaitExit().signal, SIGKILL);
}

// Forks a stand-in for the agent that runs `argv` under a RankRunner and then waits forever; gives
// its pid and the worker's.
void ForkAgentRunning(std::vector<std::string> argv, int* agent, int* worker) {
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  *agent = fork();
  ASSERT_GE(*agent, 0);
  if (*agent == 0) {
    close(report[0]);
    RankRunnerOptions o;
    o.argv = std::move(argv);
    o.wrapper = HVD_AGENT_PATH;
    std::unique_ptr<RankRunner> r;
    if (!RankRunner::Start(std::move(o), &r).ok()) _exit(1);
    int pid = r->pid();
    if (write(report[1], &pid, sizeof pid) != sizeof pid) _exit(1);
    while (true) pause();
  }
  close(report[1]);
  ASSERT_EQ(read(report[0], worker, sizeof *worker), static_cast<ssize_t>(sizeof *worker));
  close(report[0]);
}

// The process owning the runner (the agent) is SIGKILLed: PR_SET_PDEATHSIG takes its worker down.
TEST_F(RankRunnerTest, WorkerDiesWhenTheAgentIsKilled) {
  int agent = 0, worker = 0;
  ASSERT_NO_FATAL_FAILURE(ForkAgentRunning({"/bin/sleep", "100"}, &agent, &worker));
  ASSERT_TRUE(ProcessAlive(worker));
  ASSERT_EQ(kill(agent, SIGKILL), 0);
  ASSERT_EQ(waitpid(agent, nullptr, 0), agent);
  EXPECT_TRUE(WaitGone(worker, milliseconds(5000))) << "worker " << worker << " survived its agent";
}

// Reads the pid a worker wrote to `path`, waiting up to 5 s for the file.
int ReadPidFile(const std::string& path) {
  const auto until = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < until) {
    std::ifstream in(path);
    int pid = 0;
    if (in >> pid && pid > 0) return pid;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return 0;
}

// A worker's child that started a session of its own (as a daemonizing data loader does) escapes
// its process group and PR_SET_PDEATHSIG; the wrapper, its subreaper, still kills it when the
// worker exits.
TEST_F(RankRunnerTest, ADaemonizedGrandchildDiesWhenTheWorkerExits) {
  Collector c;
  RankRunnerOptions o = c.Options({"/bin/sh", "-c",
                                   "setsid /bin/sh -c 'echo $$ > grand.pid; exec sleep 100' & "
                                   "while [ ! -s grand.pid ]; do sleep 0.01; done; exit 4"});
  o.working_dir = dir_;
  RankExit e = Run(c, o);
  EXPECT_EQ(e.exit_code, 4);
  const int grand = ReadPidFile(dir_ + "/grand.pid");
  ASSERT_GT(grand, 0);
  EXPECT_TRUE(WaitGone(grand, milliseconds(3000))) << "daemonized grandchild " << grand;
}

// A SIGSTOPped worker runs its SIGTERM handler (a checkpoint, say) only once continued: the stop
// must continue it rather than wait for the SIGKILL.
TEST_F(RankRunnerTest, AStoppedWorkerRunsItsSigtermHandlerWithoutWaitingForTheGrace) {
  Collector c;
  std::unique_ptr<RankRunner> r;
  ASSERT_TRUE(RankRunner::Start(c.Options({"/bin/sh", "-c",
                                           "trap 'echo bye; exit 7' TERM; echo ready; "
                                           "while :; do sleep 0.05; done"}),
                                &r)
                  .ok());
  ASSERT_EQ(c.WaitLine([](const std::string& l) { return l == "ready"; }), "ready");
  ASSERT_EQ(kill(-r->pid(), SIGSTOP), 0);
  const auto t0 = Clock::now();
  r->Stop(std::chrono::seconds(20));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  RankExit e = c.WaitExit();
  EXPECT_EQ(e.exit_code, 7);
  EXPECT_EQ(e.signal, 0);
}

// The agent dies with SIGKILL while its worker has a daemonized child: the wrapper sees its
// lifeline break and kills both.
TEST_F(RankRunnerTest, DaemonizedGrandchildDiesWhenTheAgentIsKilled) {
  const std::string pidfile = dir_ + "/grand.pid";
  int agent = 0, worker = 0;
  ASSERT_NO_FATAL_FAILURE(ForkAgentRunning(
      {"/bin/sh", "-c",
       "setsid /bin/sh -c 'echo $$ > " + pidfile + "; exec sleep 100' & exec sleep 100"},
      &agent, &worker));
  const int grand = ReadPidFile(pidfile);
  ASSERT_GT(grand, 0);
  ASSERT_TRUE(ProcessAlive(worker));
  ASSERT_EQ(kill(agent, SIGKILL), 0);
  ASSERT_EQ(waitpid(agent, nullptr, 0), agent);
  EXPECT_TRUE(WaitGone(worker, milliseconds(5000))) << "worker " << worker;
  EXPECT_TRUE(WaitGone(grand, milliseconds(5000))) << "daemonized grandchild " << grand;
}

TEST_F(RankRunnerTest, AWrapperThatCannotRunIsAClearStartError) {
  Collector c;
  RankRunnerOptions o = c.Options({"/bin/true"});
  o.wrapper = "/nonexistent/hvd-agent";
  std::unique_ptr<RankRunner> r;
  Status s = RankRunner::Start(std::move(o), &r);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("worker wrapper /nonexistent/hvd-agent"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace hvd::agent
