// Where a stalled C++ rank is (runtime/stall/native_stacks.h): a child process installs the
// handler and waits in a function of its own beside a named thread; the signal, sent from this
// process as a rank's agent sends it, makes the child write its stack and its threads to stderr
// (a pipe here), and the child goes on. A signal the program handles or ignores is left to it.
// Every child is killed and reaped.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "stall/native_stacks.h"
#include "testutil/expect.h"

namespace hvd::runtime::stall {
namespace {

constexpr int kSignal = 40;

// Reads `fd` until `until` appears in what was read or `limit` passes; returns what was read.
std::string ReadUntil(int fd, const std::string& until, std::chrono::milliseconds limit) {
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (got.find(until) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

__attribute__((noinline)) void ChildWaitsHere(int ready_fd) {
  const char c = 'r';
  (void)!write(ready_fd, &c, 1);
  for (int i = 0; i < 600; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

struct Child {
  pid_t pid = -1;
  int err = -1;    // the child's stderr
  int ready = -1;  // a byte once it waits
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (err >= 0) close(err);
    if (ready >= 0) close(ready);
  }
};

// Forks a child that sets HVD_STACK_DUMP_SIGNAL, lets `before` set its dispositions, installs the
// handler as rank 7, writes what InstallNativeStackDump returned as one byte to `ready` and waits.
// With `pause_loop` the child waits in pause() instead, and writes 'p' to `ready` each time a
// handler has run (pause returns after it).
template <typename Before>
void Start(Child* c, Before before, bool pause_loop = false) {
  int err[2], ready[2];
  ASSERT_EQ(pipe2(err, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  c->pid = fork();
  ASSERT_GE(c->pid, 0);
  if (c->pid == 0) {
    close(err[0]);  // the parent is the only reader (one test closes its end)
    close(ready[0]);
    dup2(err[1], STDERR_FILENO);
    setenv("HVD_STACK_DUMP_SIGNAL", std::to_string(kSignal).c_str(), 1);
    before();
    std::atomic<bool> named{false};
    std::thread helper([&named] {
      pthread_setname_np(pthread_self(), "stuck-helper");
      named.store(true);
      std::this_thread::sleep_for(std::chrono::seconds(60));
    });
    helper.detach();
    for (int i = 0; i < 1000 && !named.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // asleep by the signal
    std::string detail;
    const char result =
        static_cast<char>('0' + static_cast<int>(InstallNativeStackDump(7, &detail)));
    (void)!write(ready[1], &result, 1);
    if (pause_loop) {
      const char r = 'r', p = 'p';
      (void)!write(ready[1], &r, 1);
      for (int i = 0; i < 100; ++i) {
        pause();
        (void)!write(ready[1], &p, 1);
      }
    }
    ChildWaitsHere(ready[1]);
    _exit(0);
  }
  close(err[1]);
  close(ready[1]);
  c->err = err[0];
  c->ready = ready[0];
}

char ReadByte(int fd) {
  pollfd p{fd, POLLIN, 0};
  char c = 0;
  if (poll(&p, 1, 10000) == 1 && read(fd, &c, 1) == 1) return c;
  return 0;
}

TEST(NativeStacks, TheSignalWritesTheStackAndTheThreadsAndTheProcessGoesOn) {
  Child c;
  Start(&c, [] {});
  ASSERT_EQ(ReadByte(c.ready), '0' + static_cast<int>(NativeStacks::kInstalled));
  ASSERT_EQ(ReadByte(c.ready), 'r');  // waiting in ChildWaitsHere
  ASSERT_EQ(kill(c.pid, kSignal), 0);
  const std::string out = ReadUntil(c.err, "linking with -rdynamic", std::chrono::seconds(10));
  const std::string pid = std::to_string(c.pid);
  EXPECT_HAS(out, "hvd: native stack of rank 7 (pid " + pid + "), thread " + pid + " '");
  EXPECT_HAS(out, "asked for by pid " + std::to_string(getpid()));
  // The frames start where the signal found the thread: in libc (the sleep ChildWaitsHere's loop
  // is in, or the write before it just returning), not in the handler, which lies in this binary.
  const size_t header_end = out.find("(most recent call first):\n");
  ASSERT_NE(header_end, std::string::npos) << out;
  const size_t first = header_end + std::strlen("(most recent call first):\n");
  const std::string first_frame = out.substr(first, out.find('\n', first) - first);
  EXPECT_HAS(first_frame, "libc.so");
  EXPECT_TRUE(first_frame.find("sleep") != std::string::npos ||
              first_frame.find("write") != std::string::npos)
      << first_frame;
  EXPECT_HAS(out, "native_stacks_test(");
  EXPECT_HAS(out, "hvd: the process's threads");
  EXPECT_HAS(out, "'stuck-helper' ");          // its state (S, asleep) is the scheduler's to say
  EXPECT_HAS(out, pid + " 'native_stacks_t");  // the main thread, by its name
  // The process goes on, and a later request gets a second dump. (One that reaches another
  // thread while the first dump is still ending is dropped, by design: one dump at a time. So
  // the request is repeated, a bounded number of times.)
  EXPECT_EQ(waitpid(c.pid, nullptr, WNOHANG), 0);
  std::string second;
  for (int i = 0; i < 5 && second.find("hvd: native stack of rank 7") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_EQ(kill(c.pid, kSignal), 0);
    second += ReadUntil(c.err, "linking with -rdynamic", std::chrono::seconds(3));
  }
  EXPECT_HAS(second, "hvd: native stack of rank 7");
  EXPECT_EQ(waitpid(c.pid, nullptr, WNOHANG), 0);
}

TEST(NativeStacks, AStderrNobodyReadsDoesNotEndTheProcess) {
  // `prog 2>&1 | head`: the reader is gone, and a write raises SIGPIPE, whose default ends a
  // process. The dump must not.
  Child c;
  Start(
      &c, [] { signal(SIGPIPE, SIG_DFL); }, /*pause_loop=*/true);  // as programs have it
  ASSERT_EQ(ReadByte(c.ready), '0' + static_cast<int>(NativeStacks::kInstalled));
  ASSERT_EQ(ReadByte(c.ready), 'r');
  close(c.err);
  c.err = -1;
  ASSERT_EQ(kill(c.pid, kSignal), 0);
  // The handler has run and returned (the mask lifted) once the child says 'p'; a SIGPIPE left
  // pending would have ended it before.
  EXPECT_EQ(ReadByte(c.ready), 'p');
  int status = 0;
  EXPECT_EQ(waitpid(c.pid, &status, WNOHANG), 0)
      << "the child ended: " << (WIFSIGNALED(status) ? WTERMSIG(status) : -1);
}

void Noted(int) {}

TEST(NativeStacks, ASignalTheProgramHandlesOrIgnoresIsLeftToIt) {
  for (int ignore = 0; ignore < 2; ++ignore) {
    Child c;
    Start(&c, [ignore] { signal(kSignal, ignore ? SIG_IGN : Noted); });
    EXPECT_EQ(ReadByte(c.ready), '0' + static_cast<int>(NativeStacks::kHandled)) << ignore;
    ASSERT_EQ(ReadByte(c.ready), 'r');
    ASSERT_EQ(kill(c.pid, kSignal), 0);
    EXPECT_EQ(ReadUntil(c.err, "hvd:", std::chrono::milliseconds(300)), "") << ignore;
    EXPECT_EQ(waitpid(c.pid, nullptr, WNOHANG), 0) << ignore;
  }
}

TEST(NativeStacks, OffUnlessTheVariableNamesASignal) {
  // In a child: the handler, once installed, stays for the process.
  Child c;
  c.pid = fork();
  ASSERT_GE(c.pid, 0);
  if (c.pid == 0) {
    std::string detail;
    unsetenv("HVD_STACK_DUMP_SIGNAL");
    bool ok = InstallNativeStackDump(0, &detail) == NativeStacks::kOff;
    setenv("HVD_STACK_DUMP_SIGNAL", "0", 1);
    ok = ok && InstallNativeStackDump(0, &detail) == NativeStacks::kOff;
    setenv("HVD_STACK_DUMP_SIGNAL", "forty", 1);
    ok = ok && InstallNativeStackDump(0, &detail) == NativeStacks::kUnavailable &&
         detail.find("HVD_STACK_DUMP_SIGNAL=forty") != std::string::npos;
    setenv("HVD_STACK_DUMP_SIGNAL", "40", 1);
    ok = ok && InstallNativeStackDump(0, &detail) == NativeStacks::kInstalled &&
         InstallNativeStackDump(1, &detail) == NativeStacks::kInstalled;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(c.pid, &status, 0), c.pid);
  c.pid = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace hvd::runtime::stall
