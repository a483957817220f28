#include "testutil/cross_memory.h"

#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/errno_text.h"

namespace hvd::testing {
namespace {

// At the same address in every child forked from this process.
volatile uint64_t probe_word = 0;

}  // namespace

std::string CrossMemoryUnavailable() {
  int ready[2];
  if (pipe(ready) != 0) return "pipe: " + base::ErrnoText(errno);
  const pid_t holder = fork();
  if (holder < 0) {
    const int err = errno;
    close(ready[0]);
    close(ready[1]);
    return "fork: " + base::ErrnoText(err);
  }
  if (holder == 0) {  // holds the word until killed (or 10 s)
    probe_word = 0x68766453'43707931;
    close(ready[0]);
    const char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(1);
    sleep(10);
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ssize_t got_ready;
  do {
    got_ready = read(ready[0], &c, 1);
  } while (got_ready < 0 && errno == EINTR);
  const bool up = got_ready == 1;
  close(ready[0]);
  int err = 0;
  uint64_t got = 0;
  const pid_t reader = up ? fork() : -1;
  if (reader == 0) {
    iovec to{&got, sizeof(got)};
    iovec from{const_cast<uint64_t*>(&probe_word), sizeof(got)};
    if (process_vm_readv(holder, &to, 1, &from, 1, 0) != sizeof(got))
      _exit(errno < 120 ? errno : 124);
    _exit(got == 0x68766453'43707931 ? 0 : 126);
  }
  int status = 0;
  if (reader > 0) {
    waitpid(reader, &status, 0);
    err = WIFEXITED(status) ? WEXITSTATUS(status) : 127;
  } else {
    err = up ? 127 : 125;
  }
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  if (err == 0) return "";
  if (err == 125) return "the probe's holder process did not start";
  if (err == 126) return "process_vm_readv read a wrong value";
  if (err == 127) return "the probe's reader process did not finish";
  if (err == 124) return "process_vm_readv between sibling processes failed (errno 120 or more)";
  return "process_vm_readv between sibling processes: " + base::ErrnoText(err) +
         " (kernel.yama.ptrace_scope >= 1 or a seccomp profile forbids it)";
}

}  // namespace hvd::testing
