#include "stall/native_stacks.h"

#include <dirent.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "base/errno_text.h"
#include "base/mutex.h"
#include "base/settings.h"

namespace hvd::runtime::stall {
namespace {

const base::Setting<int64_t> kStackDumpSignal(
    "HVD_STACK_DUMP_SIGNAL", nullptr, 0,
    "the signal a stall's culprit is asked for its stacks with; hvdrun's agent sets it (40) for "
    "every rank; 0: none",
    {0, 64});

constexpr int kMaxFrames = 64;

std::atomic<int> g_rank{-1};
std::atomic<bool> g_busy{false};  // one dump at a time: a second signal meanwhile is dropped
base::Mutex g_install_mu;
int g_installed HVD_GUARDED_BY(g_install_mu) = 0;  // the signal this process's handler is for

// ---- Async-signal-safe helpers: system calls and fixed buffers only, no malloc, no stdio ----

// v in decimal at out (at most 20 characters, no terminator); returns the end.
char* AppendDecimal(char* out, unsigned long long v) {
  char digits[20];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0) *out++ = digits[--n];
  return out;
}

// Up to size - 1 bytes of the file at `path` into out, NUL-terminated; the count, or -1.
ssize_t ReadSmallFile(const char* path, char* out, size_t size) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n;
  do {
    n = read(fd, out, size - 1);
  } while (n < 0 && errno == EINTR);
  close(fd);
  if (n >= 0) out[n] = '\0';
  return n;
}

class Writer {
 public:
  explicit Writer(int fd) : fd_(fd) {}
  ~Writer() { Flush(); }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  Writer& operator<<(const char* s) {
    while (*s != '\0') Put(*s++);
    return *this;
  }
  Writer& operator<<(long long v) {
    char text[24];
    char* end = text;
    if (v < 0) *end++ = '-';
    end = AppendDecimal(end, v < 0 ? 0ULL - static_cast<unsigned long long>(v) : v);
    for (const char* c = text; c != end; ++c) Put(*c);
    return *this;
  }
  void Flush() {
    size_t at = 0;
    while (at < len_) {
      const ssize_t n = write(fd_, buf_ + at, len_ - at);
      if (n > 0) {
        at += static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        break;  // stderr is gone: nothing to tell anyone
      }
    }
    len_ = 0;
  }

 private:
  void Put(char c) {
    if (len_ == sizeof(buf_)) Flush();
    buf_[len_++] = c;
  }

  int fd_;
  char buf_[1024];
  size_t len_ = 0;
};

// "/proc/self/task/<tid>/<file>" into out (64 bytes).
void TaskPath(long tid, const char* file, char* out) {
  char* p = out;
  for (const char* s = "/proc/self/task/"; *s != '\0';) *p++ = *s++;
  p = AppendDecimal(p, static_cast<unsigned long long>(tid));
  *p++ = '/';
  while (*file != '\0') *p++ = *file++;
  *p = '\0';
}

// The file's first line (at most size - 1 bytes, no newline) into out; "?" when unreadable.
void ReadLine(const char* path, char* out, size_t size) {
  if (ReadSmallFile(path, out, size) <= 0) {
    out[0] = '?';
    out[1] = '\0';
    return;
  }
  for (char* c = out; *c != '\0'; ++c) {
    if (*c == '\n') *c = '\0';
  }
}

// The state letter of a thread: the field after the command's closing parenthesis in its stat.
char TaskState(long tid) {
  char path[64], stat[256];
  TaskPath(tid, "stat", path);
  ReadLine(path, stat, sizeof(stat));
  const char* close = strrchr(stat, ')');
  return close != nullptr && close[1] == ' ' && close[2] != '\0' ? close[2] : '?';
}

// The index in `frames` of the instruction the signal interrupted (the frames before it are this
// handler's and the kernel's return trampoline), or 0 where it cannot be told.
int FirstInterruptedFrame(void* const* frames, int n, void* uctx) {
  const auto* uc = static_cast<const ucontext_t*>(uctx);
  uintptr_t pc = 0;
#if defined(__x86_64__)
  pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  pc = static_cast<uintptr_t>(uc->uc_mcontext.pc);
#else
  (void)uc;
#endif
  for (int i = 0; i < n && pc != 0; ++i) {
    if (reinterpret_cast<uintptr_t>(frames[i]) == pc) return i;
  }
  return 0;
}

void ListThreads(Writer& w) {
  const int dir = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  w << "hvd: the process's threads (id 'name' state, blocked in):\n";
  alignas(8) char buf[2048];
  for (;;) {
    const long n = syscall(SYS_getdents64, dir, buf, sizeof(buf));
    if (n <= 0) break;
    for (long at = 0; at < n;) {
      const auto* d = reinterpret_cast<const struct dirent64*>(buf + at);
      at += d->d_reclen;
      if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
      long tid = 0;
      for (const char* c = d->d_name; *c >= '0' && *c <= '9'; ++c) tid = tid * 10 + (*c - '0');
      char path[64], comm[32], wchan[64];
      TaskPath(tid, "comm", path);
      ReadLine(path, comm, sizeof(comm));
      TaskPath(tid, "wchan", path);
      ReadLine(path, wchan, sizeof(wchan));
      const char state[2] = {TaskState(tid), '\0'};
      w << "  " << static_cast<long long>(tid) << " '" << comm << "' " << state;
      if (wchan[0] != '\0' && strcmp(wchan, "0") != 0 && strcmp(wchan, "?") != 0) {
        w << " in " << wchan;
      }
      w << "\n";
    }
  }
  close(dir);
}

void Dump(const siginfo_t* info, void* uctx) {
  Writer w(STDERR_FILENO);
  const long tid = syscall(SYS_gettid);
  char path[64], comm[32];
  TaskPath(tid, "comm", path);
  ReadLine(path, comm, sizeof(comm));
  w << "hvd: native stack of rank " << static_cast<long long>(g_rank.load()) << " (pid "
    << static_cast<long long>(getpid()) << "), thread " << static_cast<long long>(tid) << " '"
    << comm << "', asked for by pid " << static_cast<long long>(info->si_pid)
    << " (most recent call first):\n";
  void* frames[kMaxFrames];
  const int n = backtrace(frames, kMaxFrames);
  const int first = FirstInterruptedFrame(frames, n, uctx);
  w.Flush();
  backtrace_symbols_fd(frames + first, n - first, STDERR_FILENO);
  ListThreads(w);
  w << "hvd: a frame shown as OBJECT(+0xOFFSET) has no exported name: `addr2line -f -C -e OBJECT "
       "0xOFFSET` names it (built with -g); linking with -rdynamic names it here\n";
}

// Whether SIGPIPE is pending on this thread itself (SigPnd in /proc/thread-self/status): a write
// raises it there. sigpending() would add the process's pending set, where a SIGPIPE that every
// thread blocks (a program's sigwait thread collects it) may wait, and the dump's own would then be
// left behind.
bool ThreadSigpipePending() {
  char status[2048];
  if (ReadSmallFile("/proc/thread-self/status", status, sizeof(status)) <= 0) return false;
  const char* at = strstr(status, "\nSigPnd:");
  if (at == nullptr) return false;
  at += std::strlen("\nSigPnd:");
  while (*at == ' ' || *at == '\t') ++at;
  uint64_t mask = 0;
  for (; *at != '\0' && *at != '\n'; ++at) {
    const char c = *at;
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return false;
    mask = mask << 4 | static_cast<uint64_t>(digit);
  }
  return (mask >> (SIGPIPE - 1) & 1) != 0;
}

void Handler(int, siginfo_t* info, void* uctx) {
  const int saved_errno = errno;
  bool idle = false;
  if (g_busy.compare_exchange_strong(idle, true)) {
    // SIGPIPE is blocked while this runs (sa_mask): stderr may be a pipe nobody reads any more
    // (`prog 2>&1 | head`), and a request for stacks must not end the rank. One the dump raised
    // is taken back before the mask lifts; one pending before is left as it was.
    const bool pipe_was_pending = ThreadSigpipePending();
    Dump(info, uctx);
    if (!pipe_was_pending && ThreadSigpipePending()) {
      sigset_t pipe;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      const struct timespec now = {0, 0};
      sigtimedwait(&pipe, nullptr, &now);
    }
    g_busy.store(false);
  }
  errno = saved_errno;
}

bool IsOurs(int sig) {
  struct sigaction cur;
  return sigaction(sig, nullptr, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) != 0 &&
         cur.sa_sigaction == Handler;
}

}  // namespace

NativeStacks InstallNativeStackDump(int rank, std::string* detail) {
  detail->clear();
  int64_t sig = 0;
  if (Status s = kStackDumpSignal.Get(&sig); !s.ok()) {
    *detail = s.message();
    return NativeStacks::kUnavailable;
  }
  if (sig == 0) return NativeStacks::kOff;
  g_rank.store(rank);
  base::MutexLock lock(&g_install_mu);
  if (g_installed == sig) return NativeStacks::kInstalled;  // (or replaced since: left so)
  struct sigaction old;
  if (sigaction(static_cast<int>(sig), nullptr, &old) != 0) {
    *detail = "sigaction(" + std::to_string(sig) + "): " + base::ErrnoText(errno);
    return NativeStacks::kUnavailable;
  }
  const bool taken =
      (old.sa_flags & SA_SIGINFO) != 0 ? old.sa_sigaction != nullptr : old.sa_handler != SIG_DFL;
  if (taken) return NativeStacks::kHandled;
  // backtrace's first call loads the unwinder (dlopen, malloc): here, never in the handler.
  void* warm[2];
  backtrace(warm, 2);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = Handler;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGPIPE);
  if (sigaction(static_cast<int>(sig), &sa, nullptr) != 0) {
    *detail = "sigaction(" + std::to_string(sig) + "): " + base::ErrnoText(errno);
    return NativeStacks::kUnavailable;
  }
  g_installed = static_cast<int>(sig);
  return NativeStacks::kInstalled;
}

int NativeStackDumpSignal() {
  base::MutexLock lock(&g_install_mu);
  return g_installed != 0 && IsOurs(g_installed) ? g_installed : 0;
}

}  // namespace hvd::runtime::stall
