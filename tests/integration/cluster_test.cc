// The whole control plane as it is deployed, on 127.0.0.1: a real hvd-launcherd and two real
// hvd-agents (hosts node-a and node-b, 2 slots each) as separate processes, and jobs run through
// the real hvdrun. Checks exit codes, tagged output, the REST answers and the metrics, and that no
// process a test started survives it.
//
// Every process is fork/exec'd in its own process group with PR_SET_PDEATHSIG(SIGKILL) (Proc, from
// tests/cli/hvdrun_process.h), and this test is their child subreaper. Each test also gives every
// process it starts a unique marker in its environment (HVD_IT_MARKER, which the agents pass on to
// their workers, and which every job also names with -x): after teardown no process in /proc may
// carry it, whoever its parent is. Every wait is bounded.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include "testutil/expect.h"
#include "testutil/http_get.h"

#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>

#include "tests/cli/hvdrun_process.h"

#if !defined(HVD_LAUNCHERD_PATH) || !defined(HVD_AGENT_PATH) || !defined(HVDRUN_PATH) || \
    !defined(EXAMPLE_TRAIN_PATH)
#error \
    "tests/CMakeLists.txt must define HVD_LAUNCHERD_PATH, HVD_AGENT_PATH, HVDRUN_PATH and EXAMPLE_TRAIN_PATH"
#endif

namespace hvd::integrationtest {
namespace {

using clitest::Clock;
using clitest::Proc;
using clitest::ProcResult;
using clitest::ReadAll;
using clitest::TempDir;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr auto kCommandTimeout = seconds(30);  // any one hvdrun command
constexpr auto kStartTimeout = seconds(15);    // launcher up, agents READY
constexpr auto kStopTimeout = seconds(10);     // a daemon's exit after SIGTERM
constexpr const char* kKillGraceMs = "2000";   // the launcher's SIGTERM -> SIGKILL grace

std::string RandomHex(int bytes) {
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
void WriteTokenFile(const std::string& path, const std::string& token) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  const std::string line = token + "\n";
  ASSERT_EQ(write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  close(fd);
}

// GET http://127.0.0.1:port/path.
using testing::HttpAnswer;
HttpAnswer HttpGet(int port, const std::string& path) {
  return testing::HttpGet(-1, "127.0.0.1", port, path);
}

std::string CmdlineOf(const std::string& pid) {
  std::string c = ReadAll("/proc/" + pid + "/cmdline");
  for (char& ch : c) {
    if (ch == '\0') ch = ' ';
  }
  return c;
}

// Whether the process's state is zombie (its memory, environ included, is gone already).
bool IsZombie(const std::string& pid) {
  const std::string stat = ReadAll("/proc/" + pid + "/stat");
  const size_t close = stat.rfind(')');
  return close == std::string::npos || stat.size() <= close + 2 || stat[close + 2] == 'Z';
}

// Every live process whose environment or command line holds `marker` ("pid: cmdline").
std::vector<std::string> ProcessesMarked(const std::string& marker,
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
bool WaitFor(F probe, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    if (probe()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
}

class Cluster : public ::testing::Test {
 protected:
  void SetUp() override {
    marker_ = "hvd-it-" + std::to_string(getpid()) + "-" + RandomHex(8);
    token_file_ = dir_ / "token";
    WriteTokenFile(token_file_, RandomHex(32));
    // Every port is picked by the kernel (port 0) and read back from the launcher's start line.
    launcher_ = Start({HVD_LAUNCHERD_PATH, "--listen", "127.0.0.1:0", "--rendezvous-listen",
                       "127.0.0.1:0", "--http", "127.0.0.1:0", "--token-file", token_file_,
                       "--kill-grace-ms", kKillGraceMs, "--heartbeat-interval-ms", "500"});
    const std::regex line(
        R"(hvd-launcherd: gRPC (127\.0\.0\.1:\d+), rendezvous (127\.0\.0\.1:\d+), HTTP )"
        R"(127\.0\.0\.1:(\d+), token (\S+)\n)");
    std::smatch m;
    std::string out;
    const bool announced = WaitFor(
        [&] {
          out = launcher_->Out();
          return std::regex_search(out, m, line) || !clitest::ProcessAlive(launcher_->pid());
        },
        kStartTimeout);
    ASSERT_TRUE(announced && !m.empty())
        << "hvd-launcherd did not announce its addresses; stdout: " << out
        << "\nstderr: " << launcher_->Err();
    grpc_ = m[1];
    http_port_ = std::stoi(m[3]);
    EXPECT_EQ(m[4], token_file_);
    for (const char* host : {"node-a", "node-b"}) {
      agents_.push_back(Start({HVD_AGENT_PATH, "--launcher", grpc_, "--token-file", token_file_,
                               "--slots", "2", "--host", host}));
    }
    json agents;
    const bool ready = WaitFor(
        [&] {
          agents = Get("/v1/agents", /*quiet=*/true);
          if (!agents.contains("agents")) return false;
          std::set<std::string> hosts;
          for (const json& a : agents["agents"]) {
            if (a["state"] == "READY") hosts.insert(a["host"].get<std::string>());
          }
          return hosts == std::set<std::string>{"node-a", "node-b"};
        },
        kStartTimeout);
    ASSERT_TRUE(ready) << "the agents never both became READY: " << agents.dump()
                       << "\nagent stderr: " << agents_[0]->Err() << agents_[1]->Err();
  }

  void TearDown() override {
    // The agents first (each stops its workers and exits 0), then the launcher (exits 0).
    for (size_t i = 0; i < agents_.size(); ++i) StopDaemon(agents_[i].get(), "hvd-agent");
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
    std::set<pid_t> daemons = {launcher_->pid()};
    for (const auto& a : agents_) daemons.insert(a->pid());
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

  TempDir dir_;
  std::string marker_, token_file_, grpc_;
  int http_port_ = 0;
  std::unique_ptr<Proc> launcher_;
  std::vector<std::unique_ptr<Proc>> agents_;
  std::set<pid_t> pids_;  // every pid this test started or was told of
};

// A sleeping job whose every rank writes its shell's pid to pid.RANK first.
const std::vector<std::string> kSleeper = {"/bin/sh", "-c",
                                           "echo $$ > pid.$HVD_RANK; exec sleep 60"};

TEST_F(Cluster, TrainsOnFourRanksAcrossTwoAgents) {
  const Clock::time_point t0 = Clock::now();
  ProcResult r = Run(Hvdrun("",
                            {"-np", "4", "-H", "node-a:2,node-b:2", "--name", "train-4",
                             EXAMPLE_TRAIN_PATH, "--steps", "50"},
                            true),
                     seconds(45));
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:step 0 loss ");
  EXPECT_HAS(r.out, "[0]<stdout>:trained on 4 ranks");
  EXPECT_EQ(r.out.find("<stderr>"), std::string::npos) << r.out;
  std::cerr << "[ timing   ] 4-rank train job through hvdrun: "
            << std::chrono::duration<double>(Clock::now() - t0).count() << " s\n";

  // GET /v1/jobs lists it; GET /v1/jobs/{id} has the whole story.
  json list = Get("/v1/jobs");
  ASSERT_TRUE(list.contains("jobs")) << list.dump();
  ASSERT_EQ(list["jobs"].size(), 1u) << list.dump();
  const std::string id = list["jobs"][0]["id"];
  EXPECT_EQ(list["jobs"][0]["state"], "SUCCEEDED");
  EXPECT_EQ(list["jobs"][0]["name"], "train-4");
  EXPECT_EQ(list["jobs"][0]["np"], 4);
  // Rank states settle with the job's end; the job itself is SUCCEEDED already.
  json job = WaitJob(id, [](const json& j) { return AllRanks(j, "EXITED"); });
  EXPECT_EQ(job["state"], "SUCCEEDED") << job.dump(2);
  EXPECT_EQ(job["exit_code"], 0);
  EXPECT_TRUE(job["failure"].is_null()) << job.dump(2);
  EXPECT_EQ(job["argv"][0], EXAMPLE_TRAIN_PATH);
  EXPECT_EQ(job["working_dir"], dir_.path());
  ASSERT_EQ(job["ranks"].size(), 4u) << job.dump(2);
  const char* kHosts[] = {"node-a", "node-a", "node-b", "node-b"};
  std::set<std::string> agent_ids;
  for (int i = 0; i < 4; ++i) {
    const json& rank = job["ranks"][i];
    EXPECT_EQ(rank["rank"], i);
    EXPECT_EQ(rank["host"], kHosts[i]) << rank.dump();
    EXPECT_EQ(rank["local_rank"], i % 2);
    EXPECT_EQ(rank["local_size"], 2);
    EXPECT_EQ(rank["cross_rank"], i / 2);
    EXPECT_EQ(rank["cross_size"], 2);
    EXPECT_GT(rank["pid"].get<int>(), 0) << rank.dump();
    EXPECT_EQ(rank["exit_code"], 0) << rank.dump();
    EXPECT_EQ(rank["signal"], 0) << rank.dump();
    EXPECT_GT(rank["end_time_ms"].get<int64_t>(), 0) << rank.dump();
    agent_ids.insert(rank["agent_id"].get<std::string>());
  }
  EXPECT_EQ(agent_ids.size(), 2u) << "ranks on two agents";
  RankPids(job);

  // The agents' slots are free again.
  json agents = Get("/v1/agents");
  ASSERT_EQ(agents["agents"].size(), 2u) << agents.dump();
  for (const json& a : agents["agents"]) {
    EXPECT_EQ(a["slots"], 2) << a.dump();
    EXPECT_EQ(a["slots_in_use"], 0) << a.dump();
    EXPECT_GT(a["pid"].get<int>(), 0);
  }

  // Prometheus text with the implementation's names and labels.
  const std::string m = Metrics();
  EXPECT_HAS(m, "# TYPE hvd_agents gauge\n");
  EXPECT_HAS(m, "hvd_agents{state=\"READY\"} 2\n");
  EXPECT_HAS(m, "hvd_agents{state=\"LOST\"} 0\n");
  EXPECT_HAS(m, "hvd_jobs{state=\"SUCCEEDED\"} 1\n");
  EXPECT_HAS(m, "hvd_jobs{state=\"FAILED\"} 0\n");
  EXPECT_HAS(m, "hvd_jobs{state=\"RUNNING\"} 0\n");
  EXPECT_HAS(m, "hvd_ranks_running 0\n");
  EXPECT_HAS(m, "# TYPE hvd_rendezvous_operations_total counter\n");
  // Each of the 4 ranks published its host and its mesh address (docs/rendezvous.md).
  std::smatch sets;
  ASSERT_TRUE(std::regex_search(m, sets,
                                std::regex(R"(hvd_rendezvous_operations_total\{op="set"\} (\d+))")))
      << m;
  EXPECT_GE(std::stoll(sets[1]), 8) << m;
  EXPECT_HAS(m, "hvd_rendezvous_operations_total{op=\"wait\"} ");
  EXPECT_HAS(m, "hvd_rendezvous_keys 0\n");  // the job's keys are dropped when it ends
  for (const json& a : agents["agents"]) {
    EXPECT_HAS(m, "hvd_agent_heartbeat_age_seconds{agent=\"" + a["id"].get<std::string>() + "\"} ");
  }

  // The other endpoints, and errors as JSON.
  HttpAnswer h = HttpGet(http_port_, "/healthz");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body, "ok\n");
  h = HttpGet(http_port_, "/v1/jobs/no-such-job");
  EXPECT_EQ(h.status, 404) << h.body;
  EXPECT_HAS(h.body, "\"error\"");
  h = HttpGet(http_port_, "/v1/jobs/bad.id");
  EXPECT_EQ(h.status, 400) << h.body;
  h = HttpGet(http_port_, "/v2/nothing");
  EXPECT_EQ(h.status, 404) << h.body;
  EXPECT_HAS(h.body, "no such endpoint");

  EXPECT_EQ(WorkersLeft(), std::vector<std::string>{});
}

TEST_F(Cluster, AFailingRankEndsTheJobAndIsNamed) {
  const std::set<std::string> before = JobIds();
  ProcResult r = Run(Hvdrun("",
                            {"-np", "4", "-H", "node-a:2,node-b:2", "/bin/sh", "-c",
                             "if [ \"$HVD_RANK\" = 2 ]; then echo boom >&2; exit 7; fi; sleep 30"},
                            true));
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 7) << r.err;
  // Torn down as soon as rank 2 failed, not when the others' sleeps end (30 s).
  EXPECT_LT(r.seconds, 12) << r.err;
  std::cerr << "[ timing   ] failing job: hvdrun exited after " << r.seconds << " s\n";
  EXPECT_HAS(r.err, "[2]<stderr>:boom\n");
  EXPECT_HAS(r.err, "failed: rank 2 on node-b exited with code 7\n");
  EXPECT_HAS(r.err, "hvdrun: last stderr lines of rank 2:\nhvdrun:   boom\n");

  const std::string id = NewJob(before);
  json job = WaitJob(id, NoRankAlive);
  EXPECT_EQ(job["state"], "FAILED") << job.dump(2);
  EXPECT_EQ(job["exit_code"], 7);
  ASSERT_TRUE(job["failure"].is_object()) << job.dump(2);
  EXPECT_EQ(job["failure"]["rank"], 2);
  EXPECT_EQ(job["failure"]["host"], "node-b");
  EXPECT_EQ(job["failure"]["exit_code"], 7);
  EXPECT_HAS(job["failure"]["stderr_tail"].get<std::string>(), "boom");
  ASSERT_EQ(job["ranks"].size(), 4u);
  for (int i : {0, 1, 3}) {
    const json& rank = job["ranks"][i];
    // Ended by the teardown, not exited on their own.
    EXPECT_EQ(rank["state"], "KILLED") << rank.dump();
    EXPECT_HAS(rank["error"].get<std::string>(), "stopped by the launcher");
  }
  EXPECT_EQ(job["ranks"][2]["exit_code"], 7);
  for (pid_t pid : RankPids(job)) EXPECT_FALSE(clitest::ProcessAlive(pid)) << pid;
  // The sleeps (children of the ranks' shells) are gone too.
  EXPECT_EQ(WorkersLeft(), std::vector<std::string>{});
  EXPECT_HAS(Metrics(), "hvd_jobs{state=\"FAILED\"} 1\n");
}

TEST_F(Cluster, CancelEndsADetachedJob) {
  const std::string id = Submit({"-np", "2", "-H", "node-a:1,node-b:1", "--name", "sleeper",
                                 kSleeper[0], kSleeper[1], kSleeper[2]});
  ASSERT_FALSE(id.empty());
  json job = WaitJob(id, [](const json& j) { return AllRanks(j, "RUNNING"); });
  EXPECT_EQ(job["state"], "RUNNING") << job.dump(2);
  EXPECT_EQ(job["ranks"][0]["host"], "node-a");
  EXPECT_EQ(job["ranks"][1]["host"], "node-b");
  const std::vector<pid_t> pids = RankPids(job);
  for (pid_t pid : pids) EXPECT_TRUE(clitest::ProcessAlive(pid)) << pid;
  EXPECT_HAS(Metrics(), "hvd_ranks_running 2\n");
  // The marker scan that proves nothing survives does see the workers (and the daemons).
  const std::vector<std::string> running = WorkersLeft(milliseconds(0));
  ASSERT_EQ(running.size(), 2u) << ::testing::PrintToString(running);
  for (const std::string& w : running) EXPECT_HAS(w, "sleep 60");
  EXPECT_EQ(ProcessesMarked(marker_).size(), 5u);

  ProcResult r = Run(Hvdrun("cancel", {id}, false));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "job " + id + ": CANCELLED");
  job = WaitJob(id, NoRankAlive, seconds(10));
  EXPECT_EQ(job["state"], "CANCELLED") << job.dump(2);
  EXPECT_EQ(job["exit_code"], 130) << job.dump(2);
  for (const json& rank : job["ranks"]) EXPECT_EQ(rank["state"], "KILLED") << rank.dump();
  for (pid_t pid : pids) EXPECT_FALSE(clitest::ProcessAlive(pid)) << pid;
  EXPECT_EQ(WorkersLeft(), std::vector<std::string>{});
  const std::string m = Metrics();
  EXPECT_HAS(m, "hvd_jobs{state=\"CANCELLED\"} 1\n");
  EXPECT_HAS(m, "hvd_ranks_running 0\n");
}

TEST_F(Cluster, SigintCancelsAnAttachedJob) {
  const std::set<std::string> before = JobIds();
  std::unique_ptr<Proc> p = Start(Hvdrun(
      "", {"-np", "4", "-H", "node-a:2,node-b:2", kSleeper[0], kSleeper[1], kSleeper[2]}, true));
  const std::string id = NewJob(before);
  ASSERT_FALSE(id.empty()) << p->Err();
  json job = WaitJob(id, [](const json& j) { return AllRanks(j, "RUNNING"); });
  const std::vector<pid_t> pids = RankPids(job);
  ASSERT_EQ(pids.size(), 4u);

  p->Signal(SIGINT);
  ProcResult r = p->Wait(seconds(15));
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_LT(r.seconds, 30);
  EXPECT_HAS(r.err, "hvdrun: SIGINT: cancelling job " + id);
  // hvdrun leaves only once the launcher reports every rank gone.
  job = Get("/v1/jobs/" + id);
  EXPECT_EQ(job["state"], "CANCELLED") << job.dump(2);
  EXPECT_TRUE(NoRankAlive(job)) << job.dump(2);
  for (pid_t pid : pids) EXPECT_FALSE(clitest::ProcessAlive(pid)) << pid;
  EXPECT_EQ(WorkersLeft(), std::vector<std::string>{});
}

TEST_F(Cluster, AProgramTheAgentsCannotRunFailsTheJobWithThePathAndTheError) {
  // -H names no local host, so hvdrun does not check the path itself: the agents report it.
  std::set<std::string> before = JobIds();
  ProcResult r =
      Run(Hvdrun("", {"-np", "2", "-H", "node-a:1,node-b:1", "/nonexistent/prog"}, true));
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 127) << r.err;  // as a shell reports a command it cannot run
  EXPECT_LT(r.seconds, 10) << r.err;
  EXPECT_HAS(r.err, "failed to start: exec /nonexistent/prog: No such file or directory");
  std::string id = NewJob(before);
  json job = WaitJob(id, NoRankAlive);
  EXPECT_EQ(job["state"], "FAILED") << job.dump(2);
  ASSERT_TRUE(job["failure"].is_object()) << job.dump(2);
  EXPECT_HAS(job["failure"]["message"].get<std::string>(), "/nonexistent/prog");
  EXPECT_HAS(job["failure"]["message"].get<std::string>(), "No such file or directory");
  EXPECT_EQ(job["exit_code"], 127);
  bool failed_to_start = false;
  for (const json& rank : job["ranks"]) failed_to_start |= rank["state"] == "FAILED_TO_START";
  EXPECT_TRUE(failed_to_start) << job.dump(2);

  // A file that exists but is not executable.
  const std::string script = dir_ / "not-executable.sh";
  clitest::WriteFile(script, "#!/bin/sh\necho never\n", 0644);
  before = JobIds();
  r = Run(Hvdrun("", {"-np", "2", "-H", "node-a:1,node-b:1", script}, true));
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 127) << r.err;
  EXPECT_HAS(r.err, "exec " + script + ": Permission denied");
  EXPECT_EQ(r.out.find("never"), std::string::npos) << r.out;
  id = NewJob(before);
  job = WaitJob(id, NoRankAlive);
  EXPECT_EQ(job["state"], "FAILED") << job.dump(2);
  EXPECT_HAS(job["failure"]["message"].get<std::string>(), script + ": Permission denied");
  EXPECT_EQ(WorkersLeft(), std::vector<std::string>{});
}

TEST_F(Cluster, AWrongTokenIsRefused) {
  const std::string wrong = dir_ / "wrong-token";
  WriteTokenFile(wrong, RandomHex(32));
  ProcResult r =
      Run(Hvdrun("", {"-np", "2", "-H", "node-a:1,node-b:1", "/bin/echo", "never"}, true, wrong));
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_HAS(r.err, "hvdrun: launcher at " + grpc_ + ": SubmitJob");
  EXPECT_HAS(r.err, "wrong cluster token");
  EXPECT_EQ(r.out, "");
  r = Run(Hvdrun("list", {}, false, wrong));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_HAS(r.err, "hvdrun: launcher at " + grpc_ + ": ListJobs");
  json jobs = Get("/v1/jobs");
  EXPECT_EQ(jobs["jobs"].size(), 0u) << jobs.dump();

  // An agent with the wrong token never joins, and says why.
  std::unique_ptr<Proc> intruder = Start({HVD_AGENT_PATH, "--launcher", grpc_, "--token-file",
                                          wrong, "--slots", "2", "--host", "node-c"});
  const bool said = WaitFor(
      [&] { return intruder->Err().find("cannot register") != std::string::npos; }, seconds(10));
  EXPECT_TRUE(said) << intruder->Err();
  EXPECT_HAS(intruder->Err(), "wrong cluster token");
  json agents = Get("/v1/agents");
  EXPECT_EQ(agents["agents"].size(), 2u) << agents.dump();
  for (const json& a : agents["agents"]) EXPECT_NE(a["host"], "node-c");
  StopDaemon(intruder.get(), "hvd-agent (wrong token)");

  // And the right token still works.
  r = Run(Hvdrun("", {"-np", "2", "-H", "node-a:1,node-b:1", "/bin/echo", "fine"}, true));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:fine\n");
  EXPECT_HAS(r.out, "[1]<stdout>:fine\n");
}

}  // namespace
}  // namespace hvd::integrationtest
