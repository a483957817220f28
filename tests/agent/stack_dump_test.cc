// The agent's half of a stalled rank's stacks (agent/stack_dump.h), on real process groups made
// here: the signal goes only to processes that catch it, and of those only to the topmost (the
// rank's own process, not the children it forked, which inherit its handler); a group where no
// process catches it is left alone (the default action of the real-time signal would end it).
#include "agent/stack_dump.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "agent/proc_fs.h"
#include "control/job_model.h"

namespace hvd::agent {
namespace {

constexpr int kSignal = control::kStackDumpSignal;
int g_report_fd = -1;

void Report(int) {
  const char c = 'D';  // a dump
  (void)!write(g_report_fd, &c, 1);
}

void Catch() {
  struct sigaction sa = {};
  sa.sa_handler = Report;
  sigaction(kSignal, &sa, nullptr);
}

// Says it is ready (its handler set), then sleeps in the child until killed; alarm() bounds it
// if the test dies first.
[[noreturn]] void Linger() {
  const char c = 'R';
  (void)!write(g_report_fd, &c, 1);
  alarm(30);
  for (;;) pause();
}

// A process group led by a forked child: `leader_catches`, then children whose handlers are
// `children_catch` (each inherits the leader's before setting its own).
class Group {
 public:
  // `grandchild`: the first child, which does not catch, forks one that catches (a handler set
  // again below a process that reset it: inherited from the leader all the same).
  Group(bool leader_catches, std::vector<bool> children_catch, bool grandchild = false) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    read_fd_ = fds[0];
    leader_ = fork();
    if (leader_ == 0) {
      close(fds[0]);
      g_report_fd = fds[1];
      setpgid(0, 0);
      if (leader_catches) Catch();
      for (size_t i = 0; i < children_catch.size(); ++i) {
        if (fork() == 0) {
          if (children_catch[i]) {
            Catch();
          } else {
            signal(kSignal, SIG_DFL);
          }
          if (i == 0 && grandchild && fork() == 0) {
            Catch();
            Linger();
          }
          Linger();
        }
      }
      Linger();
    }
    close(fds[1]);
    setpgid(leader_, leader_);  // either side may run first
    // Until every member said it is ready (its handler set), for at most 10 s.
    const size_t members = 1 + children_catch.size() + (grandchild ? 1 : 0);
    EXPECT_EQ(Read('R', members, std::chrono::seconds(10)), members);
  }
  ~Group() {
    kill(-leader_, SIGKILL);
    waitpid(leader_, nullptr, 0);
    close(read_fd_);
  }
  pid_t leader() const { return leader_; }
  // How many dumps the handlers reported within `wait` (and 200 ms after the first, for more).
  size_t Reports(std::chrono::milliseconds wait) { return Read('D', SIZE_MAX, wait); }
  // Reads until `want` bytes `c` came, or none came for `wait`; returns how many did.
  size_t Read(char c, size_t want, std::chrono::milliseconds wait) {
    size_t n = 0;
    pollfd p = {read_fd_, POLLIN, 0};
    while (n < want && poll(&p, 1, static_cast<int>(wait.count())) == 1) {
      char got;
      if (read(read_fd_, &got, 1) != 1) break;
      if (got == c) ++n;
      if (c == 'D') wait = std::chrono::milliseconds(200);
    }
    return n;
  }
  bool LeaderAlive() const { return waitpid(leader_, nullptr, WNOHANG) == 0; }

 private:
  pid_t leader_ = -1;
  int read_fd_ = -1;
};

TEST(StackDump, OnlyTheTopmostCatchingProcessOfTheGroupIsSignalled) {
  Group g(/*leader_catches=*/true, {true, false});  // a child that inherits it, one that resets it
  ASSERT_EQ(GroupMembers(g.leader()).size(), 3u);
  EXPECT_EQ(StackDumpTargets(g.leader(), kSignal), std::vector<pid_t>{g.leader()});
  EXPECT_EQ(SendStackDump(g.leader(), kSignal), std::vector<pid_t>{g.leader()});
  EXPECT_EQ(g.Reports(std::chrono::seconds(5)), 1u);
  EXPECT_TRUE(g.LeaderAlive());
}

TEST(StackDump, ACatcherBelowACatchingAncestorIsNotAskedWhateverIsBetween) {
  Group g(/*leader_catches=*/true, {false}, /*grandchild=*/true);
  ASSERT_EQ(GroupMembers(g.leader()).size(), 3u);
  EXPECT_EQ(StackDumpTargets(g.leader(), kSignal), std::vector<pid_t>{g.leader()});
}

TEST(StackDump, ACatchingChildOfALeaderThatDoesNotCatchIsTheTarget) {
  Group g(/*leader_catches=*/false, {true});  // a wrapper shell and the program it started
  std::vector<pid_t> members;
  for (const GroupMember& m : GroupMembers(g.leader())) members.push_back(m.pid);
  ASSERT_EQ(members.size(), 2u);
  const pid_t child = members[0] == g.leader() ? members[1] : members[0];
  EXPECT_EQ(StackDumpTargets(g.leader(), kSignal), std::vector<pid_t>{child});
  EXPECT_EQ(SendStackDump(g.leader(), kSignal), std::vector<pid_t>{child});
  EXPECT_EQ(g.Reports(std::chrono::seconds(5)), 1u);
  EXPECT_TRUE(g.LeaderAlive());
}

TEST(StackDump, AGroupThatDoesNotCatchItIsLeftAlone) {
  Group g(/*leader_catches=*/false, {false});
  EXPECT_FALSE(CatchesSignal(g.leader(), kSignal));
  EXPECT_TRUE(StackDumpTargets(g.leader(), kSignal).empty());
  EXPECT_TRUE(SendStackDump(g.leader(), kSignal).empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(g.LeaderAlive()) << "sent anyway: the default action ended it";
  EXPECT_TRUE(StackDumpTargets(0, kSignal).empty());
  EXPECT_FALSE(CatchesSignal(g.leader(), 0));
  EXPECT_FALSE(CatchesSignal(g.leader(), 65));
}

}  // namespace
}  // namespace hvd::agent
