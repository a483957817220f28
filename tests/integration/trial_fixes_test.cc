// What a new user's trial of hvdrun and the daemons found, end to end on the deployed shape
// (cluster_harness.h: a real hvd-launcherd with REST, two real hvd-agents with 2 slots each, the
// real hvdrun): global flags before a command, `status` text per state, one JSON shape for
// hvdrun --json and REST, the queue timeout and how long a job waited, --verbose saying the final
// state once, the daemons' --version, a busy port and their log levels.
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "tests/integration/cluster_harness.h"

namespace hvd::integrationtest {
namespace {

using Cluster = ClusterHarness;

const std::vector<std::string> kSleeper = {"/bin/sh", "-c", "exec sleep 60"};

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_F(Cluster, GlobalFlagsMayComeBeforeTheCommand) {
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{HVDRUN_PATH, "--launcher", grpc_, "--token-file", token_file_,
                                 "list"},
        std::vector<std::string>{HVDRUN_PATH, "--launcher=" + grpc_, "--timeout", "5",
                                 "--token-file=" + token_file_, "agents"},
        std::vector<std::string>{HVDRUN_PATH, "--token-file", token_file_, "status", "--launcher",
                                 grpc_}}) {
    ProcResult r = Run(argv);
    EXPECT_EQ(r.exit_code, 0) << ::testing::PrintToString(argv) << "\n" << r.err;
    EXPECT_EQ(r.err.find("-np"), std::string::npos) << r.err;
  }
  ProcResult r = Run({HVDRUN_PATH, "--launcher", grpc_, "--token-file", token_file_, "list"});
  EXPECT_EQ(r.out, "no jobs\n");
  // Run mode takes them wherever they are, as before.
  r = Run({HVDRUN_PATH, "--launcher", grpc_, "--token-file", token_file_, "-np", "1", "/bin/echo",
           "ran"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:ran");
}

TEST_F(Cluster, StatusSaysTheStateAndItsJsonIsRests) {
  const std::string id =
      Submit({"-np", "2", "-H", "node-a:1,node-b:1", kSleeper[0], kSleeper[1], kSleeper[2]});
  ASSERT_FALSE(id.empty());
  json job = WaitJob(id, [](const json& j) { return AllRanks(j, "RUNNING"); });
  RankPids(job);
  ProcResult r = Run(Hvdrun("status", {id}, false));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "state:     RUNNING\n");
  EXPECT_EQ(r.out.find("failed"), std::string::npos) << r.out;
  EXPECT_EQ(Run(Hvdrun("cancel", {id}, false)).exit_code, 0);
  job = WaitJob(id, NoRankAlive, seconds(10));

  // A job that succeeds: exit code 0 and rank 0 are values like any other.
  ProcResult ok = Run(Hvdrun("", {"-np", "2", "/bin/true"}, true));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  const std::string done = NewJob({id});
  json rest = WaitJob(done, NoRankAlive);
  r = Run(Hvdrun("status", {done, "--json"}, false));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json cli = json::parse(r.out);
  EXPECT_EQ(cli, rest) << "hvdrun status --json:\n" << cli.dump(2) << "\nREST:\n" << rest.dump(2);
  EXPECT_EQ(cli.at("ranks").at(0).at("rank"), 0);
  EXPECT_EQ(cli.at("ranks").at(0).at("exit_code"), 0);
  EXPECT_EQ(cli.at("exit_code"), 0);
  EXPECT_TRUE(cli.at("submit_time_ms").is_number_integer());

  r = Run(Hvdrun("list", {"--json"}, false));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out), Get("/v1/jobs"));
  r = Run(Hvdrun("agents", {"--json"}, false));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json cli_agents = json::parse(r.out), rest_agents = Get("/v1/agents");
  for (json* list : {&cli_agents, &rest_agents}) {
    for (json& a : list->at("agents")) a.erase("last_heartbeat_ms");  // moves between the calls
  }
  EXPECT_EQ(cli_agents, rest_agents);
  r = Run(Hvdrun("status", {"--json"}, false));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json summary = json::parse(r.out);
  EXPECT_EQ(summary.at("launcher"), grpc_);
  EXPECT_EQ(summary.at("jobs"), Get("/v1/jobs").at("jobs"));
  EXPECT_EQ(summary.at("agents").size(), 2u);
}

TEST_F(Cluster, AJobWaitingForSlotsSaysHowLongAndGivesUpAfterItsQueueTimeout) {
  // 6 ranks on 4 slots: never placed. hvdrun says it waits (after 2 s) and how long, then the
  // launcher fails the job at 5 s naming the flag and what it waited for (3 s of margin for the
  // waiting line on a loaded machine). Both write seconds alike ("2.0 s").
  ProcResult r = Run(Hvdrun("", {"-np", "6", "--queue-timeout", "5", "/bin/true"}, true));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_HAS(r.err, " is waiting for ");
  EXPECT_HAS(r.err, " s of at most 5.0 s (--queue-timeout): needs 6 slots; 4 free on 2 agents");
  EXPECT_HAS(r.err, "for slots (--queue-timeout 5.0 s): needs 6 slots; 4 free on 2 agents");
  EXPECT_GE(r.seconds, 5.0);

  // `status` and REST say how long a waiting job has waited.
  const std::string id = Submit({"-np", "6", "--queue-timeout", "60", "/bin/true"});
  ASSERT_FALSE(id.empty());
  r = Run(Hvdrun("status", {id}, false));
  EXPECT_HAS(r.out, "state:     PENDING\n");
  EXPECT_HAS(r.out, "of at most 60.0 s (--queue-timeout)\n");
  EXPECT_HAS(r.out, "waiting:   for ");
  EXPECT_EQ(r.out.find("failed"), std::string::npos) << r.out;
  const json job = Get("/v1/jobs/" + id);
  EXPECT_EQ(job.at("queue_timeout_ms"), 60000);
  EXPECT_GT(job.at("queued_since_ms").get<int64_t>(), 0);
  EXPECT_EQ(Run(Hvdrun("cancel", {id}, false)).exit_code, 0);
}

TEST_F(Cluster, VerboseSaysTheFinalStateOnce) {
  ProcResult r = Run(Hvdrun("", {"--verbose", "-np", "2", "/bin/true"}, true));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Count(r.err, "SUCCEEDED"), 1u) << r.err;
  r = Run(Hvdrun(
      "",
      {"--verbose", "-np", "2", "--start-timeout", "0", "/bin/sh", "-c", "exit $((HVD_RANK * 3))"},
      true));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(Count(r.err, "exited with code 3"), 1u) << r.err;
  EXPECT_EQ(Count(r.err, "FAILED"), 0u) << r.err;
}

// The launcher sent a watch's batch with gRPC's buffer hint, and a synchronous Write of a hinted
// message returns only when gRPC flushes on its own, about 10 s later: every `hvdrun logs JOB`
// took 10 s, and attached runs now and then got their output and end 10 s late.
TEST_F(Cluster, LogsAndAttachedRunsComeAtOnce) {
  const std::set<std::string> before = JobIds();
  for (int i = 0; i < 4; ++i) {
    ProcResult r = Run(Hvdrun("", {"-np", "2", "/bin/sh", "-c", "echo one; echo two"}, true));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(Count(r.out, "<stdout>:two"), 2u) << r.out;
    EXPECT_LT(r.seconds, 5) << "an attached run of echo took " << r.seconds << " s";
  }
  std::set<std::string> ids = JobIds();
  for (const std::string& id : before) ids.erase(id);
  ASSERT_FALSE(ids.empty());
  for (const std::string& id : ids) {
    ProcResult r = Run(Hvdrun("logs", {id}, false));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(Count(r.out, "<stdout>:one"), 2u) << r.out;
    EXPECT_LT(r.seconds, 5) << "hvdrun logs " << id << " took " << r.seconds << " s";
  }
}

TEST_F(Cluster, DaemonsHaveVersionsClearPortErrorsAndInfoLogs) {
  for (const char* daemon : {HVD_LAUNCHERD_PATH, HVD_AGENT_PATH}) {
    ProcResult r = Run({daemon, "--version"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const std::string name = std::string(daemon).substr(std::string(daemon).rfind('/') + 1);
    EXPECT_EQ(r.out.rfind(name + " ", 0), 0u) << r.out;
    EXPECT_EQ(Count(r.out, "\n"), 1u) << r.out;
  }
  ProcResult hvdrun = Run({HVDRUN_PATH, "--version"});
  EXPECT_EQ(Run({HVD_AGENT_PATH, "--version"}).out.substr(10),
            hvdrun.out.substr(7));  // same version

  // A second launcher on this test's gRPC, then its HTTP port: one line each, nothing from gRPC.
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--listen", grpc_},
        std::vector<std::string>{"--listen", "127.0.0.1:0", "--rendezvous-listen", "127.0.0.1:0",
                                 "--http", "127.0.0.1:" + std::to_string(http_port_)}}) {
    std::vector<std::string> argv = {HVD_LAUNCHERD_PATH, "--token-file", token_file_, "--state-dir",
                                     dir_ / "second"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ProcResult r = Run(argv);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(Count(r.err, "\n"), 1u) << r.err;
    EXPECT_HAS(r.err, "hvd-launcherd: cannot listen on 127.0.0.1:");
    EXPECT_HAS(r.err, "the port is in use (another hvd-launcherd");
    EXPECT_EQ(r.out, "");
  }

  // Two of its own endpoints on one port: both flags named before anything binds (it was gRPC's
  // raw bind error, then the port said to be in use). Nothing listens on these ports.
  const std::pair<std::vector<std::string>, std::string> clashes[] = {
      {{"--listen", "127.0.0.1:17999", "--rendezvous-listen", "127.0.0.1:17999"},
       "--rendezvous-listen 127.0.0.1:17999 and --listen 127.0.0.1:17999 name the same port"},
      {{"--listen", "127.0.0.1:0", "--rendezvous-listen", "127.0.0.1:17998", "--http",
        "0.0.0.0:17998"},
       "--http 0.0.0.0:17998 and --rendezvous-listen 127.0.0.1:17998 name the same port"}};
  for (const auto& [extra, said] : clashes) {
    std::vector<std::string> argv = {HVD_LAUNCHERD_PATH, "--token-file", token_file_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ProcResult r = Run(argv);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err, "hvd-launcherd: " + said +
                         ": each of hvd-launcherd's endpoints needs a port of its own\n");
  }

  // A normal job: the agents said they registered; nothing routine is a warning.
  EXPECT_EQ(Run(Hvdrun("", {"-np", "4", "/bin/true"}, true)).exit_code, 0);
  for (auto& agent : agents_) {
    EXPECT_HAS(agent->Err(), "INFO agent.cc");
    EXPECT_HAS(agent->Err(), "registered with the launcher at " + grpc_ + " as agent ");
  }
  EXPECT_HAS(launcher_->Err(), " registered (2 slots)");
  for (const std::string& log : {launcher_->Err(), agents_[0]->Err(), agents_[1]->Err()}) {
    EXPECT_EQ(log.find("WARNING"), std::string::npos) << log;
  }
}

// Starts argv with stdout and stderr into a pipe nobody reads (its read end closed at once, as
// when `| tee` or a log collector exits): every write the process makes fails with EPIPE, or
// raises SIGPIPE where it is not ignored. Its environment is this one's plus the marker.
pid_t StartIntoClosedPipe(const std::vector<std::string>& argv, const std::string& marker) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  std::vector<std::string> env = {"HVD_IT_MARKER=" + marker};
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string v = *e;
    if (v.rfind("HVD_LAUNCHER=", 0) != 0 && v.rfind("HVD_TOKEN_FILE=", 0) != 0) env.push_back(v);
  }
  std::vector<char*> args, envp;  // made before fork: the child only calls async-signal-safe ones
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  args.push_back(nullptr);
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    setpgid(0, 0);
    dup2(fds[1], STDOUT_FILENO);  // the copies lose O_CLOEXEC
    dup2(fds[1], STDERR_FILENO);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(fds[0]);
  close(fds[1]);
  return pid;
}

// SIGTERM, then its exit status (bounded; SIGKILL and -1 when it did not exit in time).
int StopAndReap(pid_t pid) {
  kill(pid, SIGTERM);
  int status = 0;
  for (int i = 0; i < 500; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

// The second cluster trial: a daemon died of SIGPIPE when the reader of its log went away (the
// launcher at its start line, an agent at its second log line), and malformed addresses and host
// names were accepted (an agent advertising "not an address" was READY; a host name with a space
// was retried forever).
TEST_F(Cluster, DaemonsOutliveTheReaderOfTheirLogAndRefuseMalformedAddresses) {
  const pid_t agent = StartIntoClosedPipe(
      {HVD_AGENT_PATH, "--launcher", grpc_, "--token-file", token_file_, "--host", "node-pipe"},
      marker_);
  ASSERT_GT(agent, 0);
  pids_.insert(agent);
  json agents;
  const bool ready = WaitFor(
      [&] {
        agents = Get("/v1/agents", /*quiet=*/true);
        if (!agents.contains("agents")) return false;
        for (const json& a : agents["agents"]) {
          if (a["host"] == "node-pipe" && a["state"] == "READY") return true;
        }
        return false;
      },
      kStartTimeout);
  EXPECT_TRUE(ready) << agents.dump();
  int status = StopAndReap(agent);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "hvd-agent: status " << status << (WIFSIGNALED(status) ? " (signal)" : "");

  const int http = FreePort();
  const pid_t launcher = StartIntoClosedPipe(
      {HVD_LAUNCHERD_PATH, "--listen", "127.0.0.1:0", "--rendezvous-listen", "127.0.0.1:0",
       "--http", "127.0.0.1:" + std::to_string(http), "--token-file", token_file_},
      marker_);
  ASSERT_GT(launcher, 0);
  pids_.insert(launcher);
  EXPECT_TRUE(WaitFor([&] { return HttpGet(http, "/v1/agents").status == 200; }, kStartTimeout));
  status = StopAndReap(launcher);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "hvd-launcherd: status " << status << (WIFSIGNALED(status) ? " (signal)" : "");

  const std::pair<std::vector<std::string>, std::string> refused[] = {
      {{HVD_AGENT_PATH, "--advertise-addr", "127.0.0.300"},
       "hvd-agent: --advertise-addr: '127.0.0.300' is no IPv4 address"},
      {{HVD_AGENT_PATH, "--advertise-addr", "not an address"},
       "hvd-agent: --advertise-addr: host 'not an address' contains ' '"},
      {{HVD_AGENT_PATH, "--host", "bad host"}, "hvd-agent: --host: host 'bad host' contains ' '"},
      {{HVD_LAUNCHERD_PATH, "--listen", "127.0.0.1:0", "--advertise-host", "8.8.8.8.8"},
       "hvd-launcherd: --advertise-host: '8.8.8.8.8' is no IPv4 address"}};
  for (const auto& [argv, said] : refused) {
    std::vector<std::string> a = argv;
    if (a[0] == HVD_AGENT_PATH) a.insert(a.end(), {"--launcher", grpc_});
    a.insert(a.end(), {"--token-file", token_file_});
    ProcResult r = Run(a, seconds(10));
    EXPECT_FALSE(r.timed_out) << ::testing::PrintToString(a);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_HAS(r.err, said);
  }
}

// An agent stopped on purpose (SIGTERM) was listed LOST at its lease with a warning, as if it had
// crashed, and every restart without --state-dir added a record ("3 ready of 6"). It says
// goodbye now: STOPPED at once, with why, and its successor on the host replaces the record.
TEST_F(Cluster, AStoppedAgentIsStoppedNotLostAndItsSuccessorReplacesIt) {
  const auto states = [&] {
    std::map<std::string, std::vector<std::string>> by_host;  // host -> states, in list order
    json agents = Get("/v1/agents", /*quiet=*/true);
    if (agents.contains("agents")) {
      for (const json& a : agents["agents"]) {
        by_host[a["host"].get<std::string>()].push_back(a["state"].get<std::string>());
      }
    }
    return by_host;
  };
  const auto stopped_at = Clock::now();
  agents_[1]->Signal(SIGTERM);
  ProcResult r = agents_[1]->Wait(kStopTimeout);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Within the lease (5 s by default): no wait for it to run out.
  EXPECT_TRUE(WaitFor([&] { return states()["node-b"] == std::vector<std::string>{"STOPPED"}; },
                      seconds(3)))
      << Get("/v1/agents").dump();
  EXPECT_LT(Clock::now() - stopped_at, seconds(4));
  json agents = Get("/v1/agents");
  for (const json& a : agents["agents"]) {
    if (a["host"] == "node-b") EXPECT_EQ(a["lost_reason"], "hvd-agent on node-b was stopped");
  }
  EXPECT_HAS(Metrics(), "hvd_agents{state=\"STOPPED\"} 1\n");
  ProcResult listed = Run(Hvdrun("agents", {}, false));
  EXPECT_HAS(listed.out, " stopped: hvd-agent on node-b was stopped\n");
  EXPECT_EQ(launcher_->Err().find("WARNING"), std::string::npos) << launcher_->Err();

  StartAgent(1);  // no --state-dir: a new id
  ASSERT_NO_FATAL_FAILURE(WaitAgentsReady());
  EXPECT_EQ(states()["node-b"], std::vector<std::string>{"READY"});
  EXPECT_EQ(Run(Hvdrun("", {"-np", "4", "/bin/true"}, true)).exit_code, 0);
}

// Cancelling a job that had succeeded printed its state as if the cancel had done something; a
// directory given as the program was said to need chmod +x.
TEST_F(Cluster, CancellingAnEndedJobSaysSoAndADirectoryIsNoProgram) {
  const std::string id = Submit({"-np", "1", "/bin/true"});
  ASSERT_FALSE(id.empty());
  WaitJob(id, NoRankAlive);
  ProcResult r = Run(Hvdrun("cancel", {id}, false));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "job " + id + ": SUCCEEDED (it had ended already: nothing to cancel)\n");

  r = Run(Hvdrun("", {"-np", "1", "-H", "node-a:1", dir_.path()}, true));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_HAS(r.err, "(it is a directory: name the program in it)");
  EXPECT_EQ(r.err.find("chmod"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hvd::integrationtest
