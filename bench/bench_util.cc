#include "bench_util.h"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "base/rendezvous_keys.h"

namespace hvd::bench {

bool ParseNpFlag(const std::string& flag, const char* value, const BadValue& bad, int* np,
                 bool* np_given) {
  if (flag != "-np") return false;
  long long n;
  if (!ParseInt(value, 1, 64, &n)) bad("a rank count 1..64, e.g. -np 4");
  *np = static_cast<int>(n);
  *np_given = true;
  return true;
}

bool ParseInt(const char* s, long long lo, long long hi, long long* out) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool ParseByteList(const std::string& s, std::vector<size_t>* out) {
  out->clear();
  for (size_t start = 0; start <= s.size();) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    size_t b;
    if (!ParseBytes(s.substr(start, comma - start), &b)) return false;
    out->push_back(b);
    start = comma + 1;
  }
  return !out->empty();
}

void ParseFlagPairs(int argc, char** argv,
                    const std::function<void(const std::string& error)>& usage,
                    const std::function<bool(const std::string& flag, const char* value,
                                             const BadValue& bad)>& handle) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") usage("");
    if (i + 1 >= argc) usage(flag + ": missing value (see usage)");
    const char* v = argv[++i];
    BadValue bad = [&](const char* form) {
      usage(flag + ": expected " + form + ", got '" + v + "'");
    };
    if (!handle(flag, v, bad)) usage("unknown flag '" + flag + "'");
  }
}

bool ParseBytes(std::string s, size_t* out) {
  size_t shift = 0;
  if (!s.empty()) {
    size_t unit = std::string_view("kmg").find(static_cast<char>(std::tolower(s.back())));
    if (unit != std::string_view::npos) {
      shift = 10 * (unit + 1);
      s.pop_back();
    }
  }
  long long v;
  if (!ParseInt(s.c_str(), 1, (1ll << 40) >> shift, &v)) return false;
  *out = static_cast<size_t>(v) << shift;
  return true;
}

std::optional<RankEnv> RankFromEnvironment(int np_flag, std::string* error) {
  error->clear();
  const char* size_env = std::getenv("HVD_SIZE");
  if (size_env == nullptr || *size_env == '\0') return std::nullopt;
  long long size, rank;
  const char* rank_env = std::getenv("HVD_RANK");
  const char* url = std::getenv("HVD_RENDEZVOUS");
  if (!ParseInt(size_env, 1, 1 << 20, &size)) {
    *error = "HVD_SIZE: expected a rank count >= 1";
  } else if (!rank_env || !ParseInt(rank_env, 0, size - 1, &rank)) {
    *error = "HVD_RANK: expected 0..HVD_SIZE-1 when HVD_SIZE is set";
  } else if (!url || !*url) {
    *error = "HVD_RENDEZVOUS: expected file:///dir when HVD_SIZE is set";
  } else if (np_flag != 0 && np_flag != size) {
    *error = "-np: disagrees with HVD_SIZE=" + std::to_string(size);
  }
  long long attempt = 0;
  const char* job = std::getenv("HVD_JOB_ID");
  const char* attempt_env = std::getenv("HVD_ATTEMPT");
  if (error->empty() && attempt_env != nullptr && *attempt_env != '\0' &&
      !ParseInt(attempt_env, 0, 1LL << 40, &attempt)) {
    *error = "HVD_ATTEMPT: expected an attempt number >= 0";
  }
  if (!error->empty()) return std::nullopt;
  RankEnv env{static_cast<int>(rank), static_cast<int>(size), url, ""};
  if (job != nullptr && *job != '\0') env.scope = base::AttemptScope(job, attempt);
  return env;
}

// ---- The launcher ----

namespace {
volatile sig_atomic_t g_signal = 0;
}  // namespace

bool Interrupted() {
  return g_signal != 0;
}

int LaunchRanks(const char* prog, int np, const RankMain& rank_main,
                const std::vector<std::pair<std::string, std::string>>& extra_env) {
  if (Interrupted()) return kExitFailed;
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/hvd-bench-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) {
    std::fprintf(stderr, "%s: mkdtemp %s: %s\n", prog, dir.c_str(), std::strerror(errno));
    return kExitFailed;
  }
  // Ctrl-C or a SIGTERM to the launcher alone: stop the ranks, reap them, remove the temp dir.
  // No SA_RESTART, so waitpid returns EINTR. Installed before forking so a signal during the
  // forks is not lost; each rank restores the launcher's previous handlers.
  struct sigaction sa {
  }, old_int{}, old_term{};
  sa.sa_handler = [](int sig) { g_signal = sig; };
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  std::fflush(nullptr);  // children must not re-flush the parent's buffered output
  const pid_t parent = getpid();
  std::vector<pid_t> pids(np, 0);  // by rank; 0 once reaped (or never started)
  int result = 0, running = 0;
  for (int r = 0; r < np && !Interrupted(); ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      // Die with the launcher; it may have died before prctl took effect.
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(kExitFailed);
      sigaction(SIGINT, &old_int, nullptr);
      sigaction(SIGTERM, &old_term, nullptr);
      setenv("HVD_RANK", std::to_string(r).c_str(), 1);
      setenv("HVD_SIZE", std::to_string(np).c_str(), 1);
      setenv("HVD_RENDEZVOUS", ("file://" + dir).c_str(), 1);
      for (const auto& [name, value] : extra_env) setenv(name.c_str(), value.c_str(), 1);
      int code = rank_main(RankEnv{r, np, "file://" + dir, ""});
      std::fflush(nullptr);  // _exit skips stdio's flush
      _exit(code);
    }
    if (pid < 0) {
      std::fprintf(stderr, "%s: fork: %s\n", prog, std::strerror(errno));
      result = kExitFailed;
      break;
    }
    pids[r] = pid;
    ++running;
  }
  // A rank that died mid-run leaves the others waiting on it until their idle timeout.
  auto kill_rest = [&] {
    for (pid_t p : pids) {
      if (p != 0) kill(p, SIGKILL);
    }
  };
  if (Interrupted() && result != kExitFailed) {
    std::fprintf(stderr, "%s: %s, stopping the ranks\n", prog, strsignal(g_signal));
    result = kExitFailed;
  }
  if (result != 0) kill_rest();
  while (running > 0) {
    int st = 0;
    pid_t pid = waitpid(-1, &st, 0);
    if (pid < 0) {
      if (errno != EINTR) break;  // ECHILD: nothing left to reap
      if (Interrupted() && result != kExitFailed) {
        std::fprintf(stderr, "%s: %s, stopping the ranks\n", prog, strsignal(g_signal));
        kill_rest();
        result = kExitFailed;
      }
      continue;
    }
    auto it = std::find(pids.begin(), pids.end(), pid);
    if (it == pids.end()) continue;
    *it = 0;
    --running;
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : kExitFailed;
    if (code == 0 || code == kExitWrong) {
      result = std::max(result, code);
      continue;
    }
    if (result != kExitFailed && WIFSIGNALED(st)) {  // exit codes: the rank said why itself
      std::fprintf(stderr, "%s: rank %d (pid %d) killed by signal %d (%s)\n", prog,
                   static_cast<int>(it - pids.begin()), pid, WTERMSIG(st), strsignal(WTERMSIG(st)));
    }
    if (result != kExitFailed) kill_rest();
    result = kExitFailed;
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return result;
}

// ---- Machine and timing ----

std::string MachineLine() {
  std::string cpu = "unknown CPU";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  cpu_set_t set;
  int nproc = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : -1;
  utsname u{};
  uname(&u);
  return cpu + ", nproc " + std::to_string(nproc) + ", " + u.sysname + " " + u.release + " " +
         u.machine;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double TimePerCall(const std::function<void()>& fn, double min_seconds) {
  for (long n = 1;; n *= 2) {
    auto t0 = Clock::now();
    for (long i = 0; i < n; ++i) fn();
    double s = SecondsSince(t0);
    if (s >= min_seconds || n >= (1l << 24)) return s / n;
  }
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t mid = v.size() / 2;
  return v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

}  // namespace hvd::bench
