// Workers: StartRank/StopJob/StopRanks semantics and the events they put in the Outbox, with real
// processes and without a launcher.
#include "agent/workers.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <thread>

namespace hvd::agent {
namespace {

using std::chrono::milliseconds;
namespace v1 = hvd::v1;

RankSpec Cmd(const std::string& job, int rank, int slot, std::vector<std::string> argv) {
  RankSpec c;
  c.job_id = job;
  c.attempt = 1;
  c.rank = rank;
  c.slot = slot;
  c.argv = std::move(argv);
  return c;
}

class WorkersTest : public ::testing::Test {
 protected:
  // Everything the outbox got so far, appended to `all_`.
  const std::vector<v1::AgentMessage>& Drain() {
    for (auto& m : outbox_.Take(Outbox::Clock::now(), true)) all_.push_back(std::move(m));
    return all_;
  }
  // Waits for a rank event of `state`.
  v1::RankEvent WaitEvent(const std::string& job, int rank, v1::RankState state) {
    for (int i = 0; i < 500; ++i) {
      for (const auto& m : Drain()) {
        const auto& e = m.rank_event();
        if (m.has_rank_event() && e.job_id() == job && e.rank() == rank && e.state() == state) {
          return e;
        }
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    ADD_FAILURE() << "no " << v1::RankState_Name(state) << " for " << job << " rank " << rank;
    return {};
  }
  std::vector<std::string> Lines(const std::string& job, int rank) {
    std::vector<std::string> out;
    for (const auto& m : Drain()) {
      if (!m.has_output() || m.output().job_id() != job) continue;
      for (const auto& l : m.output().lines()) {
        if (l.rank() == rank) out.push_back(l.text());
      }
    }
    return out;
  }
  void TearDown() override {
    workers_.Shutdown(milliseconds(0), "test over");
    errno = 0;
    EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
    EXPECT_EQ(errno, ECHILD);
  }

  static WorkersOptions TestOptions() {
    WorkersOptions o;
    o.gpus = {"3", "5"};
    o.wrapper = HVD_AGENT_PATH;
    o.rendezvous_ca_pem = "CA-OF-THE-AGENT";
    return o;
  }

  Outbox outbox_;
  Workers workers_{&outbox_, TestOptions()};
  std::vector<v1::AgentMessage> all_;
};

// hvdrun --gpu-isolation: each rank sees its slot's GPU alone.
TEST_F(WorkersTest, IsolatedEachSlotGetsItsGpuOverridingTheJobsValue) {
  RankSpec c = Cmd("j", 0, 1, {"/bin/sh", "-c", "echo \"$CUDA_VISIBLE_DEVICES\""});
  c.env["CUDA_VISIBLE_DEVICES"] = "0,1,2,3";
  c.gpu_isolation = true;
  workers_.StartRank(c);
  RankSpec d = Cmd("j", 1, 2, {"/bin/sh", "-c", "echo \"$CUDA_VISIBLE_DEVICES\""});
  d.local_rank = 1;
  d.gpu_isolation = true;
  workers_.StartRank(d);
  EXPECT_EQ(WaitEvent("j", 0, v1::RANK_EXITED).exit_code(), 0);
  EXPECT_EQ(WaitEvent("j", 1, v1::RANK_EXITED).attempt(), 1);
  EXPECT_EQ(Lines("j", 0), std::vector<std::string>{"5"});
  EXPECT_EQ(Lines("j", 1), std::vector<std::string>{"3"});  // slot 2 wraps to the first GPU
}

// The default, as horovodrun and torchrun: every rank sees every GPU of the host (the agent's own
// CUDA_VISIBLE_DEVICES), so torch.cuda.set_device(hvd.local_rank()) works on every local rank.
// An hvds:// rank trusts the agent's CA, whatever the job's environment says; hvd:// gets none.
TEST_F(WorkersTest, TlsRendezvousRanksGetTheAgentsCa) {
  const char* script = "echo \"ca=${HVD_RENDEZVOUS_CA-unset}\"";
  RankSpec tls = Cmd("t", 0, 0, {"/bin/sh", "-c", script});
  tls.env["HVD_RENDEZVOUS"] = "hvds://launcher:7071";
  tls.env["HVD_RENDEZVOUS_CA"] = "CA-OF-AN-ATTACKER";
  workers_.StartRank(tls);
  RankSpec plain = Cmd("p", 0, 1, {"/bin/sh", "-c", script});
  plain.env["HVD_RENDEZVOUS"] = "hvd://launcher:7071";
  workers_.StartRank(plain);
  EXPECT_EQ(WaitEvent("t", 0, v1::RANK_EXITED).exit_code(), 0);
  EXPECT_EQ(WaitEvent("p", 0, v1::RANK_EXITED).exit_code(), 0);
  EXPECT_EQ(Lines("t", 0), std::vector<std::string>{"ca=CA-OF-THE-AGENT"});
  EXPECT_EQ(Lines("p", 0), std::vector<std::string>{"ca=unset"});
}

TEST_F(WorkersTest, SharedEveryRankSeesTheHostsGpus) {
  const char* before = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = before != nullptr ? before : "";
  setenv("CUDA_VISIBLE_DEVICES", "3,5", 1);  // the agent's own, which its gpus {"3", "5"} came from
  auto show = [](const std::string& job, int rank, int slot, int local_rank) {
    RankSpec c = Cmd(job, rank, slot, {"/bin/sh", "-c", "echo \"$CUDA_VISIBLE_DEVICES\""});
    c.local_rank = local_rank;
    return c;
  };
  workers_.StartRank(show("j", 0, 0, 0));
  workers_.StartRank(show("j", 1, 1, 1));
  // Another job whose only rank got slot 1: its device 0 (local rank 0) must be slot 1's GPU.
  workers_.StartRank(show("k", 0, 1, 0));
  // A job that sets the variable itself (-x) keeps its value.
  RankSpec x = show("x", 0, 1, 0);
  x.env["CUDA_VISIBLE_DEVICES"] = "7";
  workers_.StartRank(x);
  for (const char* job : {"j", "k", "x"}) {
    EXPECT_EQ(WaitEvent(job, 0, v1::RANK_EXITED).exit_code(), 0);
  }
  WaitEvent("j", 1, v1::RANK_EXITED);
  if (before != nullptr) {
    setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
  } else {
    unsetenv("CUDA_VISIBLE_DEVICES");
  }
  EXPECT_EQ(Lines("j", 0), std::vector<std::string>{"3,5"});
  EXPECT_EQ(Lines("j", 1), std::vector<std::string>{"3,5"});
  EXPECT_EQ(Lines("k", 0), std::vector<std::string>{"5,3"});
  EXPECT_EQ(Lines("x", 0), std::vector<std::string>{"7"});
}

TEST_F(WorkersTest, RepeatedStartRankIsReportedNotStartedTwice) {
  workers_.StartRank(Cmd("j", 0, 0, {"/bin/sleep", "100"}));
  const int pid = WaitEvent("j", 0, v1::RANK_RUNNING).pid();
  all_.clear();
  workers_.StartRank(Cmd("j", 0, 0, {"/bin/sleep", "100"}));
  EXPECT_EQ(WaitEvent("j", 0, v1::RANK_RUNNING).pid(), pid);
  EXPECT_EQ(workers_.live_count(), 1);
  EXPECT_EQ(workers_.RunningJobs(), std::vector<std::string>{"j"});
}

TEST_F(WorkersTest, StopJobStopsOnlyThatJobAndSaysWhy) {
  workers_.StartRank(Cmd("a", 0, 0, {"/bin/sleep", "100"}));
  workers_.StartRank(Cmd("a", 1, 1, {"/bin/sleep", "100"}));
  workers_.StartRank(Cmd("b", 0, 0, {"/bin/sleep", "100"}));
  WaitEvent("b", 0, v1::RANK_RUNNING);
  EXPECT_EQ((workers_.UnstoppedJobs()), (std::map<std::string, int>{{"a", 2}, {"b", 1}}));
  EXPECT_EQ(workers_.StopJob("a", milliseconds(1000), "job a failed"), 2);
  EXPECT_EQ(workers_.StopJob("nope", milliseconds(1000), "?"), 0);
  v1::RankEvent k = WaitEvent("a", 1, v1::RANK_KILLED);
  EXPECT_EQ(k.error(), "job a failed");
  EXPECT_EQ(k.signal(), SIGTERM);
  WaitEvent("a", 0, v1::RANK_KILLED);
  EXPECT_EQ(workers_.RunningJobs(), std::vector<std::string>{"b"});
  workers_.Reap();
  EXPECT_EQ(workers_.live_count(), 1);
  workers_.Shutdown(milliseconds(1000), "agent stopping");
  EXPECT_EQ(WaitEvent("b", 0, v1::RANK_KILLED).error(), "agent stopping");
  // After Shutdown nothing starts.
  workers_.StartRank(Cmd("c", 0, 0, {"/bin/sleep", "100"}));
  EXPECT_NE(WaitEvent("c", 0, v1::RANK_FAILED_TO_START).error().find("shutting down"),
            std::string::npos);
}

TEST_F(WorkersTest, StopRanksStopsOnlyThoseRanksOfThatAttempt) {
  for (int r = 0; r < 3; ++r) workers_.StartRank(Cmd("e", r, r, {"/bin/sleep", "100"}));
  WaitEvent("e", 2, v1::RANK_RUNNING);
  EXPECT_EQ(workers_.StopRanks("e", 0, {1}, milliseconds(1000), "old attempt"), 0);
  EXPECT_EQ(workers_.StopRanks("e", 1, {1, 7}, milliseconds(1000), "worker 1 hung"), 1);
  v1::RankEvent k = WaitEvent("e", 1, v1::RANK_KILLED);
  EXPECT_EQ(k.error(), "worker 1 hung");
  EXPECT_EQ(k.signal(), SIGTERM);
  EXPECT_EQ(workers_.live_count(), 2);
  EXPECT_EQ((workers_.UnstoppedJobs()), (std::map<std::string, int>{{"e", 2}}));
  EXPECT_EQ(workers_.RunningJobs(), std::vector<std::string>{"e"});
}

TEST_F(WorkersTest, ARankThatExitsByItselfIsExitedNotKilled) {
  workers_.StartRank(Cmd("j", 0, 0, {"/bin/sh", "-c", "echo bye >&2; exit 7"}));
  v1::RankEvent e = WaitEvent("j", 0, v1::RANK_EXITED);
  EXPECT_EQ(e.exit_code(), 7);
  EXPECT_EQ(e.stderr_tail(), "bye");
  EXPECT_TRUE(e.error().empty());
}

TEST_F(WorkersTest, AsyncStartsRunSideBySideAndAStopDuringTheStartStillStopsThem) {
  for (int r = 0; r < 3; ++r) workers_.StartRankAsync(Cmd("j", r, r, {"/bin/sleep", "100"}));
  // At once, while the starts are (most likely) still in flight: every claimed rank counts.
  EXPECT_EQ(workers_.StopJob("j", milliseconds(1000), "job j cancelled"), 3);
  for (int r = 0; r < 3; ++r) {
    v1::RankEvent k = WaitEvent("j", r, v1::RANK_KILLED);
    EXPECT_EQ(k.error(), "job j cancelled") << "rank " << r;
  }
  EXPECT_TRUE(workers_.RunningJobs().empty());
  // A rank started asynchronously and left running is stopped by Shutdown like any other.
  workers_.StartRankAsync(Cmd("k", 0, 0, {"/bin/sleep", "100"}));
  WaitEvent("k", 0, v1::RANK_RUNNING);
  workers_.Shutdown(milliseconds(1000), "agent stopping");
  EXPECT_EQ(WaitEvent("k", 0, v1::RANK_KILLED).error(), "agent stopping");
}

}  // namespace
}  // namespace hvd::agent
