// --run-as on the agent's side, with real processes: CheckRunAs's refusals (agent not root,
// unknown user, root without --allow-run-as-root), and Workers starting a rank as another user
// through the real worker wrapper (ids, groups, HOME/USER/LOGNAME, output forwarded, a stop still
// kills it). The tests run as root and create the system user hvdtest-runas when it is missing
// (it stays: other suites and reruns use it); without root or useradd they skip, saying why.
#include <grp.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <thread>

#include "agent/worker_wrapper.h"
#include "agent/workers.h"
#include "testutil/expect.h"

namespace hvd::agent {
namespace {

using std::chrono::milliseconds;
namespace v1 = hvd::v1;

constexpr char kUser[] = "hvdtest-runas";
constexpr char kNoUser[] = "hvdtest-no-such-user";

// "" when kUser exists (created if needed), else why the test cannot run.
std::string EnsureTestUser() {
  if (geteuid() != 0) return "the tests do not run as root: no user switch is possible";
  if (getpwnam(kUser) != nullptr) return "";
  if (access("/usr/sbin/useradd", X_OK) != 0)
    return "useradd is missing: cannot create " + std::string(kUser);
  const std::string cmd = std::string("/usr/sbin/useradd --system --no-create-home ") + kUser;
  if (std::system(cmd.c_str()) != 0 && getpwnam(kUser) == nullptr) return cmd + " failed";
  return getpwnam(kUser) != nullptr ? "" : cmd + " created no user";
}

#define REQUIRE_TEST_USER()                   \
  do {                                        \
    const std::string why = EnsureTestUser(); \
    if (!why.empty()) GTEST_SKIP() << why;    \
  } while (0)

TEST(CheckRunAs, RefusesRootUnlessAllowed) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  Status s = CheckRunAs("root", /*allow_root=*/false, "host-a");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_HAS(s.message(), "--run-as root is root (uid 0)");
  EXPECT_HAS(s.message(), "hvd-agent on host-a");
  EXPECT_HAS(s.message(), "--allow-run-as-root");
  EXPECT_TRUE(CheckRunAs("root", /*allow_root=*/true, "host-a").ok());
}

TEST(CheckRunAs, UnknownUserNamesUserAndHost) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  Status s = CheckRunAs(kNoUser, false, "host-b");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_HAS(s.message(), std::string("no user '") + kNoUser + "' on host host-b");
}

// The refusal of an agent that is not root, from a process that really is not.
TEST(CheckRunAs, AgentNotRootRefusesEveryUser) {
  REQUIRE_TEST_USER();
  const passwd* pw = getpwnam(kUser);
  const uid_t uid = pw->pw_uid;
  const gid_t gid = pw->pw_gid;
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(p[0]);
    if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0) _exit(3);
    const std::string m = CheckRunAs(kUser, true, "host-c").message();
    ssize_t unused = write(p[1], m.data(), m.size());
    (void)unused;
    _exit(0);
  }
  close(p[1]);
  std::string message;
  char buf[512];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) message.append(buf, n);
  close(p[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_HAS(message, "hvd-agent runs as uid " + std::to_string(uid) +
                          ": --run-as needs an agent started as root");
}

TEST(WrapperArgv, CarriesTheUserBeforeTheSeparator) {
  EXPECT_EQ(WrapperArgv("/cg/procs", {"prog", "x"}, "alice"),
            (std::vector<std::string>{"hvd-wrapper", kWorkerWrapperFlag, "/cg/procs", "--run-as",
                                      "alice", "--", "prog", "x"}));
  EXPECT_EQ(WrapperArgv("", {"prog"}),
            (std::vector<std::string>{"hvd-wrapper", kWorkerWrapperFlag, "", "--", "prog"}));
}

RankSpec Cmd(const std::string& job, const std::string& run_as, std::vector<std::string> argv) {
  RankSpec c;
  c.job_id = job;
  c.attempt = 1;
  c.rank = 0;
  c.argv = std::move(argv);
  c.run_as = run_as;
  c.working_dir = "/";
  return c;
}

class RunAsWorkers : public ::testing::Test {
 protected:
  const std::vector<v1::AgentMessage>& Drain() {
    for (auto& m : outbox_.Take(Outbox::Clock::now(), true)) all_.push_back(std::move(m));
    return all_;
  }
  v1::RankEvent WaitEvent(const std::string& job, v1::RankState state) {
    for (int i = 0; i < 1000; ++i) {  // bounded: 10 s
      for (const auto& m : Drain()) {
        if (m.has_rank_event() && m.rank_event().job_id() == job &&
            m.rank_event().state() == state) {
          return m.rank_event();
        }
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    ADD_FAILURE() << "no " << v1::RankState_Name(state) << " for " << job;
    return {};
  }
  std::vector<std::string> Lines(const std::string& job) {
    std::vector<std::string> out;
    for (const auto& m : Drain()) {
      if (!m.has_output() || m.output().job_id() != job) continue;
      for (const auto& l : m.output().lines()) out.push_back(l.text());
    }
    return out;
  }
  void TearDown() override {
    workers_.Shutdown(milliseconds(0), "test over");
    errno = 0;
    EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
    EXPECT_EQ(errno, ECHILD);
  }

  static WorkersOptions TestOptions() {
    WorkersOptions o;
    o.wrapper = HVD_AGENT_PATH;
    o.host = "host-w";
    return o;
  }

  Outbox outbox_;
  Workers workers_{&outbox_, TestOptions()};
  std::vector<v1::AgentMessage> all_;
};

TEST_F(RunAsWorkers, RankRunsAsTheUserWithItsEnvironment) {
  REQUIRE_TEST_USER();
  const passwd* pw = getpwnam(kUser);
  const std::string want = std::to_string(pw->pw_uid) + " " + std::to_string(pw->pw_uid) + " " +
                           std::to_string(pw->pw_gid) + " " + std::to_string(pw->pw_gid) + " " +
                           pw->pw_dir + " " + kUser + " " + kUser;
  workers_.StartRank(Cmd("j", kUser,
                         {"/bin/sh", "-c",
                          "echo $(id -ru) $(id -u) $(id -rg) $(id -g) $HOME $USER $LOGNAME; "
                          "grep '^Groups:' /proc/self/status"}));
  EXPECT_EQ(WaitEvent("j", v1::RANK_EXITED).exit_code(), 0);
  const std::vector<std::string> lines = Lines("j");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], want);
  // Only the user's own groups: none of root's supplementary groups is kept.
  EXPECT_EQ(lines[1], "Groups:\t" + std::to_string(pw->pw_gid) + " ");
}

TEST_F(RunAsWorkers, RootNeedsAllowRunAsRoot) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  workers_.StartRank(Cmd("r", "root", {"/bin/true"}));
  const v1::RankEvent e = WaitEvent("r", v1::RANK_FAILED_TO_START);
  EXPECT_HAS(e.error(), "--allow-run-as-root");
  EXPECT_HAS(e.error(), "host-w");
}

TEST_F(RunAsWorkers, UnknownUserFailsToStart) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  workers_.StartRank(Cmd("u", kNoUser, {"/bin/true"}));
  EXPECT_HAS(WaitEvent("u", v1::RANK_FAILED_TO_START).error(),
             std::string("no user '") + kNoUser + "' on host host-w");
}

// The wrapper stays root: a stop still reaches a rank of another user, and nothing survives.
TEST_F(RunAsWorkers, StopKillsTheUsersRank) {
  REQUIRE_TEST_USER();
  // It ignores SIGTERM and leaves a child behind: only the wrapper's SIGKILL of the group, cgroup
  // and descendants ends both.
  workers_.StartRank(Cmd("s", kUser, {"/bin/sh", "-c", "trap '' TERM; sleep 30 & echo $!; wait"}));
  const int pid = WaitEvent("s", v1::RANK_RUNNING).pid();
  ASSERT_GT(pid, 0);
  int sleeper = 0;
  for (int i = 0; i < 1000 && sleeper == 0; ++i) {  // bounded: 10 s
    const std::vector<std::string> lines = Lines("s");
    if (!lines.empty()) sleeper = std::atoi(lines[0].c_str());
    if (sleeper == 0) std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_GT(sleeper, 0) << "the rank never printed its child's pid";
  EXPECT_EQ(workers_.StopJob("s", milliseconds(100), "cancelled"), 1);
  const v1::RankEvent killed = WaitEvent("s", v1::RANK_KILLED);
  EXPECT_EQ(killed.signal(), SIGKILL);
  for (int p : {pid, sleeper}) {
    EXPECT_NE(access(("/proc/" + std::to_string(p)).c_str(), F_OK), 0) << p << " survived";
  }
}

}  // namespace
}  // namespace hvd::agent
