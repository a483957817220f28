// Elastic jobs across agents (docs/elastic.md), with hvd-launcherd and hvd-agents as separate
// processes on 127.0.0.1 (cluster_harness.h) and the Horovod elastic script of the hvdrun tests
// (tests/cli/elastic_program.py): the agents are the discovery. An agent that registers mid-job
// gets workers up to --max-np, which join with the state of rank 0 while the others move at their
// next commit; an agent killed with kill -9 takes its workers with it and the others go on; a
// discovery script that moves the job to another host has the old workers stopped once the new
// ones hold the state. The
// final model is checked exactly, the membership events through REST, and nothing survives.
// Skips when /usr/bin/python3 has no torch.
#include "cluster_harness.h"

#ifndef HVD_PYTHON_DIR
#error "HVD_PYTHON_DIR must name build/python (tests/CMakeLists.txt)"
#endif

namespace hvd::integrationtest {
namespace {

const std::string kPython = "/usr/bin/python3";
const std::string kProgram = std::string(HVD_SOURCE_DIR) + "/tests/cli/elastic_program.py";

class ElasticCluster : public ClusterHarness {
 protected:
  Config Configure() override {
    Config c;
    c.hosts = {"node-a"};  // node-b joins mid-job (Grow) or is there from the start (Shrink)
    return c;
  }
  void SetUp() override {
    ProcResult r =
        clitest::RunProcess({kPython, "-c", "import torch"}, dir_.path(), std::chrono::seconds(30));
    if (r.exit_code != 0) GTEST_SKIP() << kPython << " cannot import torch: " << r.err;
    ClusterHarness::SetUp();
  }
  void AddAgent(const std::string& host) {
    config_.hosts.push_back(host);
    agents_.resize(config_.hosts.size());
    StartAgent(config_.hosts.size() - 1);
    ASSERT_NO_FATAL_FAILURE(WaitAgentsReady());
  }
  // Waits (bounded) until `text` is in the job's output: the workers train.
  void WaitOutput(Proc* run, const std::string& text) {
    const auto deadline = Clock::now() + seconds(40);
    while (run->Out().find(text) == std::string::npos && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(50));
    }
    ASSERT_NE(run->Out().find(text), std::string::npos) << run->Out() << run->Err();
  }
  std::vector<std::string> Job(const std::vector<std::string>& flags,
                               const std::vector<std::string>& program_args) {
    std::vector<std::string> args = {"-x", std::string("PYTHONPATH=") + HVD_PYTHON_DIR};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back(kPython);
    args.push_back(kProgram);
    args.insert(args.end(), program_args.begin(), program_args.end());
    return Hvdrun("", args, true);
  }
};

TEST_F(ElasticCluster, AnAgentThatRegistersMidJobGetsWorkersUpToMaxNp) {
  // 2 workers on node-a; the job may grow to 4. The steps leave the new workers (python3 and
  // torch's import on a loaded machine: 2-5 s) several seconds to join before the last commit.
  constexpr int kSteps = 90;
  std::unique_ptr<Proc> run =
      Start(Job({"-np", "2", "--min-np", "1", "--max-np", "4"},
                {"--steps", std::to_string(kSteps), "--step-sleep", "0.1", "--report-first"}));
  const std::string id = NewJob({});
  ASSERT_FALSE(id.empty());
  // Training is under way on node-a: both workers completed an allreduce.
  ASSERT_NO_FATAL_FAILURE(WaitOutput(run.get(), "worker 0 first allreduce"));
  ASSERT_NO_FATAL_FAILURE(WaitOutput(run.get(), "worker 1 first allreduce"));
  ASSERT_NO_FATAL_FAILURE(AddAgent("node-b"));
  ProcResult r = run->Wait(seconds(60));
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.err, " joined; 4 workers (--max-np 4)");
  // Workers 0 and 1 moved at the commit of step k: weight = 2*k + 4*(kSteps-k) everywhere.
  const std::string marker = "[0]<stdout>:worker 0 reset: rank 0/4 at step ";
  const size_t at = r.out.find(marker);
  ASSERT_NE(at, std::string::npos) << r.out << r.err;
  const int k = std::atoi(r.out.c_str() + at + marker.size());
  EXPECT_GT(k, 0);
  const std::string weight =
      "weight " + std::to_string(2 * k + 4 * (kSteps - k)) + " steps " + std::to_string(kSteps);
  for (int w = 0; w < 4; ++w) {
    const std::string me = std::to_string(w);
    EXPECT_HAS(r.out, "[" + me + "]<stdout>:worker " + me + " final: rank " + me + "/4 " + weight);
  }
  const json j = Get("/v1/jobs/" + id);
  ASSERT_TRUE(j.contains("elastic")) << j.dump(2);
  EXPECT_EQ(j["elastic"]["generation"], 1);
  EXPECT_EQ(j["elastic"]["workers"], json({0, 1, 2, 3}));
  EXPECT_EQ(WorkersLeft(), std::vector<std::string>{});
}

// An agent that registers after the workers' last commit (they evaluate or save before they
// exit) gets workers that can never meet the others: the first worker to finish ends the job's
// membership, the new ones are told so by hvd.init() and end, and the job still succeeds.
TEST_F(ElasticCluster, WorkersAddedAfterTheLastCommitDoNotFailAFinishedJob) {
  std::unique_ptr<Proc> run =
      Start(Job({"-np", "2", "--min-np", "1", "--max-np", "4"},
                {"--steps", "20", "--step-sleep", "0.05", "--post-sleep", "6"}));
  const std::string id = NewJob({});
  ASSERT_FALSE(id.empty());
  const auto trained = Clock::now() + seconds(30);
  while (run->Out().find("final: rank 1/2") == std::string::npos && Clock::now() < trained) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  ASSERT_NE(run->Out().find("final: rank 1/2"), std::string::npos) << run->Out() << run->Err();
  ASSERT_NO_FATAL_FAILURE(AddAgent("node-b"));  // the workers are in their post-training sleep
  ProcResult r = run->Wait(seconds(60));
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:worker 0 final: rank 0/2 weight 40 steps 20");
  EXPECT_HAS(r.err, " joined; 4 workers (--max-np 4)");  // it did grow, after training
  const json j = Get("/v1/jobs/" + id);
  EXPECT_EQ(j["state"], "SUCCEEDED") << j.dump(2);
  EXPECT_EQ(WorkersLeft(), std::vector<std::string>{});
}

// The discovery script moves the job from node-a to node-b in one answer: node-b's new workers
// join (generation 1), but node-a's stay until worker 2, rank 0 after them, holds the training
// state (it committed after syncing from rank 0); then they are stopped, not as failures, and
// node-b's go on alone with the model trained so far (generation 2). Stopping them earlier would
// have the others sync to worker 2's initial model (a failure restores the last commit).
TEST_F(ElasticCluster, ADiscoveryScriptMovingTheJobStopsTheOldWorkersOnceTheNewHoldTheState) {
  ASSERT_NO_FATAL_FAILURE(AddAgent("node-b"));
  const std::string hosts = dir_ / "hosts";
  clitest::WriteFile(hosts, "node-a:2\n");
  // --max-np is -np (2): the workers waiting to leave must not hold node-b's places. 25 s of
  // training leaves node-b's workers (python3 and torch's import on a loaded machine: 2-5 s)
  // time to join and commit.
  constexpr int kSteps = 250;
  std::unique_ptr<Proc> run =
      Start(Job({"-np", "2", "--min-np", "1", "--host-discovery-script", "cat " + hosts},
                {"--steps", std::to_string(kSteps), "--step-sleep", "0.1", "--report-first"}));
  const std::string id = NewJob({});
  ASSERT_FALSE(id.empty());
  ASSERT_NO_FATAL_FAILURE(WaitOutput(run.get(), "worker 0 first allreduce"));
  ASSERT_NO_FATAL_FAILURE(WaitOutput(run.get(), "worker 1 first allreduce"));
  clitest::WriteFile(hosts + ".new", "node-b:2\n");
  ASSERT_EQ(rename((hosts + ".new").c_str(), hosts.c_str()), 0);
  ProcResult r = run->Wait(seconds(120));
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.err,
             "generation 1: workers 2 on node-b, 3 on node-b joined; 4 workers (--max-np 2; "
             "workers 0, 1 leave the list once the new ones hold the state)");
  EXPECT_HAS(r.err,
             "workers 0, 1 go on though --host-discovery-script's list has no room for "
             "them any more: no other worker would stay; stopped once workers on the listed "
             "hosts hold the training state");
  EXPECT_HAS(r.err, "generation 2: worker ");
  EXPECT_HAS(r.err,
             " on node-a was removed: its host node-a is not in --host-discovery-script's "
             "list any more");
  // 2 workers until step k1 (node-a's moved to generation 1 at that commit), 4 until k2 (the
  // commit node-b's went back to when node-a's were stopped), then 2.
  auto step_of = [&](const std::string& marker) {
    const size_t at = r.out.find(marker);
    EXPECT_NE(at, std::string::npos) << marker << "\n" << r.out << r.err;
    return at == std::string::npos ? -1 : std::atoi(r.out.c_str() + at + marker.size());
  };
  const int k1 = step_of("[0]<stdout>:worker 0 reset: rank 0/4 at step ");
  const int k2 = step_of("[2]<stdout>:worker 2 reset: rank 0/2 at step ");
  EXPECT_GT(k1, 0);
  EXPECT_GT(k2, k1);  // worker 2 had committed in generation 1
  const std::string weight = "weight " +
                             std::to_string(2 * k1 + 4 * (k2 - k1) + 2 * (kSteps - k2)) +
                             " steps " + std::to_string(kSteps);
  EXPECT_HAS(r.out, "[2]<stdout>:worker 2 final: rank 0/2 " + weight);
  EXPECT_HAS(r.out, "[3]<stdout>:worker 3 final: rank 1/2 " + weight);
  EXPECT_EQ(r.out.find("worker 0 final"), std::string::npos) << r.out;
  EXPECT_EQ(WorkersLeft(), std::vector<std::string>{});
}

TEST_F(ElasticCluster, KillingAnAgentTakesItsWorkersAndTheOthersGoOn) {
  ASSERT_NO_FATAL_FAILURE(AddAgent("node-b"));
  std::unique_ptr<Proc> run =
      Start(Job({"-np", "4", "--min-np", "2", "-H", "node-a:2,node-b:2"},
                {"--steps", "60", "--step-sleep", "0.1", "--report-first"}));
  const std::string id = NewJob({});
  ASSERT_FALSE(id.empty());
  for (const char* w : {"0", "1", "2", "3"}) {  // every worker trains before node-b goes
    ASSERT_NO_FATAL_FAILURE(WaitOutput(run.get(), std::string("worker ") + w + " first allreduce"));
  }
  kill(agents_[1]->pid(), SIGKILL);  // node-b and its workers 2 and 3
  agents_[1]->Wait(seconds(5));
  ProcResult r = run->Wait(seconds(90));
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.err, "agent on node-b lost");
  const std::string marker = "[0]<stdout>:worker 0 reset: rank 0/2 at step ";
  const size_t at = r.out.find(marker);
  ASSERT_NE(at, std::string::npos) << r.out << r.err;
  const int k = std::atoi(r.out.c_str() + at + marker.size());
  const std::string weight = "weight " + std::to_string(4 * k + 2 * (60 - k)) + " steps 60";
  EXPECT_HAS(r.out, "[0]<stdout>:worker 0 final: rank 0/2 " + weight);
  EXPECT_HAS(r.out, "[1]<stdout>:worker 1 final: rank 1/2 " + weight);
  agents_[1].reset();  // already dead: the teardown stops only the live ones
  EXPECT_EQ(WorkersLeft(), std::vector<std::string>{});
}

}  // namespace
}  // namespace hvd::integrationtest
