// The whole control plane as it is deployed, on 127.0.0.1: a real hvd-launcherd and two real
// hvd-agents (hosts node-a and node-b, 2 slots each) as separate processes, and jobs run through
// the real hvdrun. Checks exit codes, tagged output, the REST answers and the metrics, and that no
// process a test started survives it (cluster_harness.h).
#include "tests/integration/cluster_harness.h"

#ifndef EXAMPLE_TRAIN_PATH
#error "tests/CMakeLists.txt must define EXAMPLE_TRAIN_PATH"
#endif

namespace hvd::integrationtest {
namespace {

using Cluster = ClusterHarness;

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
  // Job details need the token; the answer without one says how to send it.
  h = hvd::testing::HttpGet(-1, "127.0.0.1", http_port_, "/v1/jobs");
  EXPECT_EQ(h.status, 401) << h.body;
  EXPECT_HAS(h.body, "Authorization: Bearer");

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
  // The marker scan that proves nothing survives does see the workers, their wrappers (and the
  // daemons).
  const std::vector<std::string> running = WorkersLeft(milliseconds(0));
  ASSERT_EQ(running.size(), 4u) << ::testing::PrintToString(running);
  int sleeps = 0, wrappers = 0;
  for (const std::string& w : running) {
    sleeps += w.find(": sleep 60") != std::string::npos;
    wrappers += w.find("hvd-wrapper --hvd-worker-wrapper") != std::string::npos;
  }
  EXPECT_EQ(sleeps, 2) << ::testing::PrintToString(running);
  EXPECT_EQ(wrappers, 2) << ::testing::PrintToString(running);
  EXPECT_EQ(ProcessesMarked(marker_).size(), 7u);

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
