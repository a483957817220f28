// A cluster of real processes on 127.0.0.1 for tests: hvd-launcherd and hvd-agents as separate
// processes, jobs run through the real hvdrun, the REST API read over HTTP. Shared by the
// integration suite (tests/integration/) and the fault-injection suite (tests/faults/).
//
// Every process is fork/exec'd in its own process group with PR_SET_PDEATHSIG(SIGKILL) (Proc, from
// tests/cli/hvdrun_process.h), and the test is their child subreaper. Each test also gives every
// process it starts a unique marker in its environment (HVD_IT_MARKER, which the agents pass on to
// their workers, and which every job also names with -x): after teardown no process in /proc may
// carry it, whoever its parent is. Every wait is bounded.
//
// Daemons can be killed and started again (kill -9 the launcher, then StartLauncher() on the same
// ports and state dir), so the ports are chosen up front rather than read back.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>

#include "tests/cli/hvdrun_process.h"
#include "testutil/expect.h"
#include "testutil/http_get.h"

#if !defined(HVD_LAUNCHERD_PATH) || !defined(HVD_AGENT_PATH) || !defined(HVDRUN_PATH)
#error "tests/CMakeLists.txt must define HVD_LAUNCHERD_PATH, HVD_AGENT_PATH and HVDRUN_PATH"
#endif

namespace hvd::integrationtest {

using clitest::Clock;
using clitest::Proc;
using clitest::ProcResult;
using clitest::ReadAll;
using clitest::TempDir;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

inline constexpr auto kCommandTimeout = seconds(30);  // any one hvdrun command
inline constexpr auto kStartTimeout = seconds(15);    // launcher up, agents READY
inline constexpr auto kStopTimeout = seconds(10);     // a daemon's exit after SIGTERM
inline constexpr const char* kKillGraceMs = "2000";   // the launcher's SIGTERM -> SIGKILL grace

inline std::string RandomHex(int bytes) {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < bytes; ++i) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", rd() & 0xff);
    out += b;
  }
  return out;
}

// Created with mode 0600 from the start: the launcher and the agents refuse anything looser.
inline void WriteTokenFile(const std::string& path, const std::string& token) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  const std::string line = token + "\n";
  ASSERT_EQ(write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  close(fd);
}

// GET http://127.0.0.1:port/path, without a token (the fixture's HttpGet sends the cluster's).
using hvd::testing::HttpAnswer;
inline HttpAnswer HttpGet(int port, const std::string& path) {
  return hvd::testing::HttpGet(-1, "127.0.0.1", port, path);
}

inline std::string CmdlineOf(const std::string& pid) {
  std::string c = ReadAll("/proc/" + pid + "/cmdline");
  for (char& ch : c) {
    if (ch == '\0') ch = ' ';
  }
  return c;
}

// Whether the process's state is zombie (its memory, environ included, is gone already).
inline bool IsZombie(const std::string& pid) {
  const std::string stat = ReadAll("/proc/" + pid + "/stat");
  const size_t close = stat.rfind(')');
  return close == std::string::npos || stat.size() <= close + 2 || stat[close + 2] == 'Z';
}

// Every live process whose environment or command line holds `marker` ("pid: cmdline").
inline std::vector<std::string> ProcessesMarked(const std::string& marker,
                                                const std::set<pid_t>& exclude = {}) {
  std::vector<std::string> found;
  DIR* d = opendir("/proc");
  if (d == nullptr) return found;
  const std::string self = std::to_string(getpid());
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string pid = e->d_name;
    if (pid == self || exclude.count(std::atoi(pid.c_str()))) continue;
    const std::string cmdline = CmdlineOf(pid);
    const std::string environ_text = ReadAll("/proc/" + pid + "/environ");  // "" if not ours
    if (cmdline.find(marker) == std::string::npos &&
        environ_text.find(marker) == std::string::npos) {
      continue;
    }
    if (IsZombie(pid)) continue;
    found.push_back(pid + ": " + cmdline);
  }
  closedir(d);
  return found;
}

// Polls `probe` every 20 ms until it returns true or `timeout` passes; returns its last answer.
template <typename F>
inline bool WaitFor(F probe, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    if (probe()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
}

// A free TCP port on 127.0.0.1 (bound, read back, released: the usual small race is accepted).
inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    return 0;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

class ClusterHarness : public ::testing::Test {
 protected:
  struct Config {
    std::vector<std::string> hosts = {"node-a", "node-b"};  // one agent each
    int slots = 2;
    std::vector<std::string> launcher_flags;  // added to the launcher's command line
    bool state_dirs = false;                  // the launcher and each agent get a --state-dir
  };
  virtual Config Configure() { return Config(); }

  void SetUp() override {
    config_ = Configure();
    marker_ = "hvd-it-" + std::to_string(getpid()) + "-" + RandomHex(8);
    token_file_ = dir_ / "token";
    token_ = RandomHex(32);
    WriteTokenFile(token_file_, token_);
    // A port found free may be taken by a concurrent test before the launcher binds it (ctest
    // -j): a launcher that exits at start is started again on fresh ports, twice at most.
    std::string why;
    for (int attempt = 0; attempt < 3; ++attempt) {
      for (int* port : {&grpc_port_, &kv_port_, &http_port_}) {
        *port = FreePort();
        ASSERT_GT(*port, 0) << "no free port on 127.0.0.1";
      }
      grpc_ = "127.0.0.1:" + std::to_string(grpc_port_);
      if (TryStartLauncher(&why)) break;
      std::fprintf(stderr, "cluster harness: attempt %d: %s\n", attempt + 1, why.c_str());
      // Hung, or refused its command line (exit 2, the same every time): no retry.
      ASSERT_FALSE(clitest::ProcessAlive(launcher_->pid())) << why;
      ASSERT_NE(launcher_exit_, 2) << why;
      pids_.erase(launcher_->pid());  // reaped: the pid may be reused by another process
      launcher_.reset();
    }
    ASSERT_TRUE(launcher_ != nullptr) << why;
    agents_.resize(config_.hosts.size());
    for (size_t i = 0; i < config_.hosts.size(); ++i) StartAgent(i);
    ASSERT_NO_FATAL_FAILURE(WaitAgentsReady());
  }

  void TearDown() override {
    // The agents first (each stops its workers and exits 0), then the launcher (exits 0).
    for (auto& a : agents_) {
      if (a) StopDaemon(a.get(), "hvd-agent");
    }
    if (launcher_) StopDaemon(launcher_.get(), "hvd-launcherd");
    // Nothing this test started may survive: no child (or orphan re-parented to this subreaper)...
    EXPECT_EQ(clitest::Leftovers(), std::vector<std::string>{});
    // ...no process anywhere carrying this test's marker...
    std::vector<std::string> marked;
    WaitFor([&] { return (marked = ProcessesMarked(marker_)).empty(); }, seconds(3));
    EXPECT_EQ(marked, std::vector<std::string>{}) << "processes of this test survived it";
    for (const std::string& p : marked) kill(std::atoi(p.c_str()), SIGKILL);
    // ...and none of the pids it saw (daemons, hvdrun, ranks as the REST answers named them).
    for (pid_t pid : pids_) EXPECT_FALSE(clitest::ProcessAlive(pid)) << "pid " << pid;
  }

  // Starts hvd-launcherd on this test's ports (again, after a kill) and waits for its start line.
  void StartLauncher() {
    std::string why;
    ASSERT_TRUE(TryStartLauncher(&why)) << why;
  }

  // As StartLauncher; false with what the launcher said when it did not start (it exited: its
  // output is read after it was reaped, so none is lost; or it never announced itself).
  bool TryStartLauncher(std::string* why) {
    std::vector<std::string> argv = {HVD_LAUNCHERD_PATH,
                                     "--listen",
                                     grpc_,
                                     "--rendezvous-listen",
                                     "127.0.0.1:" + std::to_string(kv_port_),
                                     "--http",
                                     "127.0.0.1:" + std::to_string(http_port_),
                                     "--token-file",
                                     token_file_,
                                     "--kill-grace-ms",
                                     kKillGraceMs,
                                     "--heartbeat-interval-ms",
                                     "500"};
    if (config_.state_dirs) {
      argv.push_back("--state-dir");
      argv.push_back(dir_ / "launcher-state");
    }
    argv.insert(argv.end(), config_.launcher_flags.begin(), config_.launcher_flags.end());
    launcher_ = Start(argv);
    const std::string want = "hvd-launcherd: gRPC " + grpc_ + ", rendezvous";
    std::string out;
    const bool announced = WaitFor(
        [&] {
          out = launcher_->Out();
          return out.find(want) != std::string::npos || !clitest::ProcessAlive(launcher_->pid());
        },
        kStartTimeout);
    if (announced && out.find(want) != std::string::npos) return true;
    if (!clitest::ProcessAlive(launcher_->pid())) {
      const ProcResult r = launcher_->Wait(seconds(5));
      launcher_exit_ = r.exit_code;
      *why = "hvd-launcherd exited at start (exit code " + std::to_string(r.exit_code) +
             "); stdout: " + r.out + "\nstderr: " + r.err;
    } else {
      *why = "hvd-launcherd did not announce itself within " +
             std::to_string(kStartTimeout.count()) + " s; stdout: " + out +
             "\nstderr: " + launcher_->Err();
    }
    return false;
  }

  void StartAgent(size_t i) {
    std::vector<std::string> argv = {HVD_AGENT_PATH,
                                     "--launcher",
                                     grpc_,
                                     "--token-file",
                                     token_file_,
                                     "--slots",
                                     std::to_string(config_.slots),
                                     "--host",
                                     config_.hosts[i]};
    if (config_.state_dirs) {
      argv.push_back("--state-dir");
      argv.push_back(dir_ / ("agent-state-" + config_.hosts[i]));
    }
    agents_[i] = Start(argv);
  }

  // Waits until every configured host has a READY agent.
  void WaitAgentsReady() {
    json agents;
    const std::set<std::string> want(config_.hosts.begin(), config_.hosts.end());
    const bool ready = WaitFor(
        [&] {
          agents = Get("/v1/agents", /*quiet=*/true);
          if (!agents.contains("agents")) return false;
          std::set<std::string> hosts;
          for (const json& a : agents["agents"]) {
            if (a["state"] == "READY") hosts.insert(a["host"].get<std::string>());
          }
          return hosts == want;
        },
        kStartTimeout);
    std::string errs;
    for (const auto& a : agents_) errs += a ? a->Err() : "";
    ASSERT_TRUE(ready) << "the agents never all became READY: " << agents.dump()
                       << "\nagent stderr: " << errs;
  }

  // fork/exec in its own process group, PDEATHSIG, output captured, the marker in its environment.
  std::unique_ptr<Proc> Start(const std::vector<std::string>& argv) {
    auto p = std::make_unique<Proc>(
        argv, dir_.path(),
        std::vector<std::string>{"HVD_IT_MARKER=" + marker_, "HVD_LAUNCHER=", "HVD_TOKEN_FILE="},
        dir_.path());
    pids_.insert(p->pid());
    return p;
  }

  void StopDaemon(Proc* p, const std::string& name) {
    p->Signal(SIGTERM);
    ProcResult r = p->Wait(kStopTimeout);  // SIGKILLs its group when it does not exit in time
    EXPECT_FALSE(r.timed_out) << name << " ignored SIGTERM; stderr: " << r.err;
    EXPECT_EQ(r.exit_code, 0) << name << " stderr: " << r.err;
  }

  // GET http://127.0.0.1:port/path with the cluster token, which the launcher's /v1/* needs.
  HttpAnswer HttpGet(int port, const std::string& path) {
    return hvd::testing::HttpGet(-1, "127.0.0.1", port, path, token_);
  }

  // The launcher's REST answer as JSON (a failed expectation, and null, when there is none).
  json Get(const std::string& path, bool quiet = false) {
    HttpAnswer a = HttpGet(http_port_, path);
    if (!a.error.empty() || a.status != 200) {
      if (!quiet) ADD_FAILURE() << "GET " << path << ": " << a.status << " " << a.error << a.body;
      return json();
    }
    json j = json::parse(a.body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() && !quiet) ADD_FAILURE() << "GET " << path << ": not JSON: " << a.body;
    return j.is_discarded() ? json() : j;
  }
  std::string Metrics() {
    HttpAnswer a = HttpGet(http_port_, "/metrics");
    EXPECT_EQ(a.status, 200) << a.error << a.body;
    return a.body;
  }
  std::set<std::string> JobIds() {
    std::set<std::string> ids;
    json jobs = Get("/v1/jobs");
    if (jobs.contains("jobs")) {
      for (const json& j : jobs["jobs"]) ids.insert(j["id"].get<std::string>());
    }
    return ids;
  }
  // The one job the launcher knows of that is not in `before`.
  std::string NewJob(const std::set<std::string>& before) {
    std::string id;
    WaitFor(
        [&] {
          for (const std::string& j : JobIds()) {
            if (!before.count(j)) id = j;
          }
          return !id.empty();
        },
        seconds(10));
    EXPECT_FALSE(id.empty()) << "no new job in GET /v1/jobs";
    return id;
  }
  // Polls GET /v1/jobs/{id} until `done` holds for it (bounded); returns the last answer.
  json WaitJob(const std::string& id, const std::function<bool(const json&)>& done,
               milliseconds timeout = seconds(20)) {
    json j;
    const bool ok = WaitFor(
        [&] {
          j = Get("/v1/jobs/" + id, /*quiet=*/true);
          return !j.is_null() && done(j);
        },
        timeout);
    EXPECT_TRUE(ok) << "job " << id << " never reached the expected state: " << j.dump(2);
    return j;
  }
  static bool AllRanks(const json& job, const char* state) {
    if (!job.contains("ranks") || job["ranks"].size() != job["np"].get<size_t>()) return false;
    for (const json& r : job["ranks"]) {
      if (r["state"] != state) return false;
    }
    return true;
  }
  static bool NoRankAlive(const json& job) {
    if (!job.contains("ranks")) return false;
    for (const json& r : job["ranks"]) {
      const std::string s = r["state"];
      if (s == "PENDING" || s == "STARTING" || s == "RUNNING") return false;
    }
    return true;
  }
  // The ranks' pids from the REST answer; remembered for the teardown's check.
  std::vector<pid_t> RankPids(const json& job) {
    std::vector<pid_t> pids;
    for (const json& r : job["ranks"]) {
      const pid_t pid = r["pid"].get<pid_t>();
      if (pid <= 0) continue;  // never started
      pids.push_back(pid);
      pids_.insert(pid);
    }
    return pids;
  }
  // Processes of this test other than the launcher and the agents: the jobs' workers and hvdrun.
  std::vector<std::string> WorkersLeft(milliseconds wait = seconds(3)) {
    std::set<pid_t> daemons;
    if (launcher_) daemons.insert(launcher_->pid());
    for (const auto& a : agents_) {
      if (a) daemons.insert(a->pid());
    }
    std::vector<std::string> left;
    WaitFor([&] { return (left = ProcessesMarked(marker_, daemons)).empty(); }, wait);
    return left;
  }

  // hvdrun [subcommand] --launcher ... --token-file ... ARGS, and for a job (run or submit) also
  // -x HVD_IT_MARKER so every rank carries the marker whatever the agent passes on.
  std::vector<std::string> Hvdrun(const std::string& subcommand,
                                  const std::vector<std::string>& args, bool job,
                                  const std::string& token_file = "") {
    std::vector<std::string> a = {HVDRUN_PATH};
    if (!subcommand.empty()) a.push_back(subcommand);
    for (const std::string& x : {std::string("--launcher"), grpc_, std::string("--token-file"),
                                 token_file.empty() ? token_file_ : token_file}) {
      a.push_back(x);
    }
    if (job) {
      a.push_back("-x");
      a.push_back("HVD_IT_MARKER");
    }
    a.insert(a.end(), args.begin(), args.end());
    return a;
  }
  ProcResult Run(const std::vector<std::string>& argv, milliseconds timeout = kCommandTimeout) {
    std::unique_ptr<Proc> p = Start(argv);
    return p->Wait(timeout);
  }
  // `hvdrun submit ...`: the job id it prints.
  std::string Submit(const std::vector<std::string>& args) {
    ProcResult r = Run(Hvdrun("submit", args, true));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string id = r.out;
    while (!id.empty() && id.back() == '\n') id.pop_back();
    EXPECT_FALSE(id.empty()) << r.err;
    return id;
  }

  Config config_;
  TempDir dir_;
  std::string marker_, token_file_, token_, grpc_;
  int grpc_port_ = 0, kv_port_ = 0, http_port_ = 0;
  std::unique_ptr<Proc> launcher_;
  std::vector<std::unique_ptr<Proc>> agents_;
  std::set<pid_t> pids_;    // every pid this test started or was told of
  int launcher_exit_ = -1;  // the exit code of a launcher that exited at start
};

}  // namespace hvd::integrationtest
