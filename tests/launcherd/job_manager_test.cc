// JobManager's rules without gRPC: agents are fake links that record the commands sent to them.
#include "launcherd/job_manager.h"

#include <gtest/gtest.h>

#include "tests/launcherd/job_manager_fixture.h"
#include "testutil/expect.h"

#include <csignal>

namespace hvd::launcherd {
namespace {

using namespace std::chrono_literals;

class JobManagerTest : public JobManagerFixture {};

TEST_F(JobManagerTest, RefusesBadSpecsNamingTheFix) {
  std::string id;
  JobSpec spec;
  spec.np = 2;
  EXPECT_EQ(jobs_->Submit(spec, &id).code(), StatusCode::kInvalidArgument);
  spec.argv = {"./x"};
  spec.env = {{"HVD_RANK", "3"}};
  Status s = jobs_->Submit(spec, &id);
  EXPECT_NE(s.message().find("HVD_RANK"), std::string::npos) << s.message();
  spec.env.clear();
  spec.hosts = {{"a", 1}};
  s = jobs_->Submit(spec, &id);
  EXPECT_NE(s.message().find("gives only 1 slots"), std::string::npos) << s.message();
  EXPECT_TRUE(jobs_->List().empty());
}

TEST_F(JobManagerTest, QueuesUntilAnAgentRegistersThenStarts) {
  const std::string id = Submit(2);
  EXPECT_EQ(Get(id).state, JobState::kPending);
  EXPECT_EQ(Get(id).reason, "needs 2 slots; no agent registered");
  auto a = AddAgent("h1", 2);
  JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kStarting);
  ASSERT_EQ(a->starts.size(), 2u);
  const StartRankCommand& c = a->starts[1];
  EXPECT_EQ(c.argv, (std::vector<std::string>{"./train", "--lr", "0.1"}));
  EXPECT_EQ(c.placement.rank, 1);
  EXPECT_EQ(c.placement.slot, 1);
  EXPECT_EQ(c.env.at("HVD_RENDEZVOUS"), "hvd://10.0.0.1:7071");
  EXPECT_EQ(c.env.at("HVD_ADVERTISE_ADDR"), "addr-h1");
  EXPECT_EQ(c.env.at("HVD_JOB_ID"), id);
  EXPECT_EQ(c.env.at("NCCL_DEBUG"), "INFO");
  // The secret opens exactly this job's keys, until the job is gone.
  std::string prefix;
  ASSERT_TRUE(jobs_->ResolveSecret(c.env.at("HVD_JOB_SECRET"), &prefix));
  EXPECT_EQ(prefix, "job/" + id + "/");
  EXPECT_FALSE(jobs_->ResolveSecret("wrong", &prefix));

  Event(a, id, 0, RankState::kRunning);
  EXPECT_EQ(Get(id).state, JobState::kStarting);
  Event(a, id, 1, RankState::kRunning);
  EXPECT_EQ(Get(id).state, JobState::kRunning);
  ASSERT_TRUE(store_.Set("job/" + id + "/attempt/0/host/0", "x").ok());
  Event(a, id, 0, RankState::kExited);
  Event(a, id, 1, RankState::kExited);
  st = Get(id);
  EXPECT_EQ(st.state, JobState::kSucceeded);
  EXPECT_EQ(st.exit_code, 0);
  EXPECT_TRUE(a->stops.empty());
  EXPECT_FALSE(jobs_->ResolveSecret(c.env.at("HVD_JOB_SECRET"), &prefix));
  EXPECT_EQ(store_.stats().keys, 0u);  // the job's rendezvous keys are erased
}

TEST_F(JobManagerTest, FirstFailureIsTheCauseAndStopsEveryAgent) {
  auto a = AddAgent("ha", 1);
  auto b = AddAgent("hb", 1);
  const std::string id = Submit(2);
  Event(a, id, 0, RankState::kRunning);
  Event(b, id, 1, RankState::kRunning);
  Event(b, id, 1, RankState::kExited, 0, SIGSEGV, "line1\nSegmentation fault\n");
  JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_EQ(st.exit_code, 128 + SIGSEGV);
  ASSERT_TRUE(st.has_failure);
  EXPECT_EQ(st.failure.rank, 1);
  EXPECT_EQ(st.failure.host, "hb");
  EXPECT_EQ(st.failure.message, "rank 1 on hb was killed by SIGSEGV (signal 11)");
  EXPECT_EQ(st.failure.stderr_tail, "line1\nSegmentation fault\n");
  // Only the agent with a live rank needs telling.
  ASSERT_EQ(a->stops.size(), 1u);
  EXPECT_EQ(a->stops[0].job_id, id);
  EXPECT_EQ(a->stops[0].grace_ms, 1234);
  EXPECT_EQ(a->stops[0].reason, st.failure.message);
  EXPECT_TRUE(b->stops.empty());
  // The teardown's own kill changes nothing but the rank.
  Event(a, id, 0, RankState::kKilled, 0, SIGTERM);
  st = Get(id);
  EXPECT_EQ(st.failure.rank, 1);
  EXPECT_EQ(st.ranks[0].state, RankState::kKilled);
}

TEST_F(JobManagerTest, FailedToStartAndExitCodes) {
  auto a = AddAgent("h", 1);
  const std::string id = Submit(1);
  RankEventReport e;
  e.job_id = id;
  e.rank = 0;
  e.state = RankState::kFailedToStart;
  e.error = "exec ./train: No such file or directory";
  jobs_->OnRankEvent(Id(a), e);
  JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_EQ(st.exit_code, 127);
  EXPECT_EQ(st.failure.message,
            "rank 0 on h failed to start: exec ./train: No such file or directory");
  // The slot is free again: the next job starts.
  const std::string next = Submit(1);
  EXPECT_EQ(Get(next).state, JobState::kStarting);
}

// A rank its agent ended on its own (the launcher unreachable past the lease, the agent stopped)
// failed through no fault of its own: the job's exit code is 1, not 128 + the signal that ended
// it (143 read as a rank that died of SIGTERM).
TEST_F(JobManagerTest, ARankItsAgentEndedExitsOneWhateverTheSignal) {
  auto a = AddAgent("h", 2);
  const std::string id = Submit(2);
  Event(a, id, 0, RankState::kRunning);
  Event(a, id, 1, RankState::kRunning);
  Event(a, id, 1, RankState::kKilled, 0, SIGTERM, "", "hvd-agent on h was stopped");
  JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_EQ(st.exit_code, 1);
  EXPECT_EQ(st.failure.message, "rank 1 on h was killed by its agent: hvd-agent on h was stopped");
}

TEST_F(JobManagerTest, EventsFromTheWrongAgentAreIgnored) {
  auto a = AddAgent("ha", 1);
  auto b = AddAgent("hb", 1);
  const std::string id = Submit(1, {{"ha", 1}});
  Event(b, id, 0, RankState::kExited, 9);
  EXPECT_EQ(Get(id).state, JobState::kStarting);
}

TEST_F(JobManagerTest, CancelPendingAndRunning) {
  const std::string pending = Submit(1, {{"nowhere", 1}});
  EXPECT_EQ(Get(pending).reason, "no agent on host nowhere yet (no agent registered)");
  JobState state;
  ASSERT_TRUE(jobs_->Cancel(pending, "", &state).ok());
  EXPECT_EQ(state, JobState::kCancelled);
  EXPECT_EQ(Get(pending).exit_code, 130);
  EXPECT_EQ(jobs_->Cancel("nope", "", &state).code(), StatusCode::kNotFound);
  // An id that is not one comes back escaped and cut: hvdrun echoed its escape sequences to the
  // terminal, and a 20 KB one made a reply larger than gRPC's metadata limit.
  JobStatus none;
  Status missing = jobs_->Get("a\nb\x1b[31m" + std::string(20000, 'x'), &none);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_HAS(missing.message(), "no job 'a\\nb\\x1b[31m");
  EXPECT_EQ(missing.message().find('\x1b'), std::string::npos) << missing.message();
  EXPECT_LT(missing.message().size(), 400u);

  auto a = AddAgent("h", 1);
  const std::string id = Submit(1);
  Event(a, id, 0, RankState::kRunning);
  ASSERT_TRUE(jobs_->Cancel(id, "user pressed Ctrl-C", &state).ok());
  EXPECT_EQ(Get(id).reason, "cancelled: user pressed Ctrl-C");
  ASSERT_EQ(a->stops.size(), 1u);
  ASSERT_TRUE(jobs_->Cancel(id, "again", &state).ok());  // idempotent
  EXPECT_EQ(a->stops.size(), 1u);
}

TEST_F(JobManagerTest, NeverFitsFailsAtOnce) {
  AddAgent("small", 1);
  const std::string id = Submit(2, {{"small", 2}});
  JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_EQ(st.exit_code, 1);
  EXPECT_NE(st.reason.find("host small must take 2 ranks but its agent has 1 slot"),
            std::string::npos)
      << st.reason;
}

TEST_F(JobManagerTest, LostAgentFailsItsJobs) {
  auto a = AddAgent("ha", 1);
  auto b = AddAgent("hb", 1);
  const std::string id = Submit(2);
  Event(a, id, 0, RankState::kRunning);
  Event(b, id, 1, RankState::kRunning);
  AgentInfo lost;
  lost.id = Id(b);
  lost.host = "hb";
  jobs_->OnAgentLost(lost);
  JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_EQ(st.failure.rank, 1);
  EXPECT_EQ(st.failure.message.rfind("agent on hb lost", 0), 0u) << st.failure.message;
  EXPECT_EQ(st.ranks[1].state, RankState::kKilled);
  EXPECT_EQ(a->stops.size(), 1u);
}

TEST_F(JobManagerTest, HeartbeatsReconcileWithTheAgent) {
  auto a = AddAgent("h", 1);
  jobs_->OnHeartbeat(Id(a), {"ghost"});  // a job this launcher never had
  ASSERT_EQ(a->stops.size(), 1u);
  EXPECT_EQ(a->stops[0].job_id, "ghost");
  const std::string id = Submit(1);
  Event(a, id, 0, RankState::kRunning);
  JobState state;
  ASSERT_TRUE(jobs_->Cancel(id, "", &state).ok());
  // The agent no longer runs it but never said so: after reconcile_after its rank counts as gone.
  jobs_->OnHeartbeat(Id(a), {});
  EXPECT_EQ(Get(id).ranks[0].state, RankState::kKilled);
  EXPECT_EQ(jobs_->Counts().slots_in_use.count(Id(a)), 0u);
}

std::vector<JobEvent> Drain(JobManager& jobs, const std::string& id, int64_t from, bool follow,
                            WatchCursor* cursor, bool* done) {
  std::vector<JobEvent> all;
  for (int i = 0; i < 20 && !*done; ++i) {
    std::vector<JobEvent> events;
    EXPECT_TRUE(jobs.NextEvents(id, from, follow, 10ms, cursor, &events, done).ok());
    all.insert(all.end(), events.begin(), events.end());
  }
  return all;
}

std::vector<std::string> Describe(const std::vector<JobEvent>& events) {
  std::vector<std::string> out;
  for (const JobEvent& e : events) {
    if (e.kind == JobEvent::Kind::kProgress) out.push_back("progress " + e.progress);
    if (e.kind == JobEvent::Kind::kOutput) out.push_back("output " + e.output.text);
    if (e.kind == JobEvent::Kind::kStatus) {
      out.push_back(std::string("status ") + control::JobStateName(e.status.state));
    }
  }
  return out;
}

TEST_F(JobManagerTest, WatchYieldsTheHistoryInOrderAndEndsWithTheFinalStatus) {
  auto a = AddAgent("h", 1);
  const std::string id = Submit(1);
  jobs_->OnOutput(Id(a), id, {{0, false, "early", -1}});
  WatchCursor cursor;
  bool done = false;
  std::vector<JobEvent> ev = Drain(*jobs_, id, 0, true, &cursor, &done);
  EXPECT_FALSE(done);
  EXPECT_EQ(Describe(ev), (std::vector<std::string>{"status STARTING", "progress agents ready 1/1",
                                                    "output early"}));
  EXPECT_EQ(ev[2].output.seq, 0);

  Event(a, id, 0, RankState::kRunning);
  jobs_->OnOutput(Id(a), id, {{0, true, "late", -1}, {7, false, "no such rank", -1}});
  Event(a, id, 0, RankState::kExited);
  ev = Drain(*jobs_, id, 0, true, &cursor, &done);
  ASSERT_TRUE(done);
  EXPECT_EQ(Describe(ev), (std::vector<std::string>{"progress ranks started 1/1", "status RUNNING",
                                                    "output late", "status SUCCEEDED"}));
  EXPECT_EQ(ev.back().status.ranks[0].state, RankState::kExited);

  // A late watcher gets the whole history and the end at once.
  WatchCursor late;
  done = false;
  ev = Drain(*jobs_, id, 0, true, &late, &done);
  ASSERT_TRUE(done);
  EXPECT_EQ(Describe(ev),
            (std::vector<std::string>{"status STARTING", "progress agents ready 1/1",
                                      "output early", "progress ranks started 1/1",
                                      "status RUNNING", "output late", "status SUCCEEDED"}));

  // A resumed watch (from_seq > 0): the current status, then only the output it missed.
  WatchCursor resumed;
  done = false;
  ev = Drain(*jobs_, id, 1, true, &resumed, &done);
  ASSERT_TRUE(done);
  EXPECT_EQ(Describe(ev),
            (std::vector<std::string>{"status SUCCEEDED", "output late", "status SUCCEEDED"}));
}

TEST_F(JobManagerTest, WatchOfAPendingJobWithoutFollowEnds) {
  const std::string id = Submit(1, {{"elsewhere", 1}});
  WatchCursor cursor;
  bool done = false;
  std::vector<JobEvent> ev = Drain(*jobs_, id, 0, false, &cursor, &done);
  ASSERT_TRUE(done);
  EXPECT_EQ(Describe(ev), (std::vector<std::string>{"status PENDING", "progress agents ready 0/1",
                                                    "status PENDING"}));
  EXPECT_EQ(ev.back().status.reason, "no agent on host elsewhere yet (no agent registered)");
  std::vector<JobEvent> none;
  EXPECT_EQ(jobs_->NextEvents("nope", 0, true, 1ms, &cursor, &none, &done).code(),
            StatusCode::kNotFound);
}

TEST_F(JobManagerTest, OutputLogIsBounded) {
  auto a = AddAgent("h", 1);
  const std::string id = Submit(1);
  for (int i = 0; i < 200; ++i) jobs_->OnOutput(Id(a), id, {{0, false, std::to_string(i), -1}});
  WatchCursor cursor;
  bool done = false;
  std::vector<JobEvent> ev = Drain(*jobs_, id, 0, false, &cursor, &done);
  ASSERT_TRUE(done);
  // The oldest entries are gone (the watcher is told), the newest 50 kept, the status last.
  ASSERT_EQ(ev.size(), 52u);
  EXPECT_EQ(ev[0].progress.rfind("output dropped", 0), 0u) << ev[0].progress;
  EXPECT_EQ(ev[1].output.seq, 150);
  EXPECT_EQ(ev[50].output.text, "199");
  EXPECT_EQ(ev[51].kind, JobEvent::Kind::kStatus);
}

}  // namespace
}  // namespace hvd::launcherd

namespace hvd::launcherd {
namespace {

// Rank 1's failure is reported first, but rank 0 died first (the others failed because it was
// gone, and their agent was quicker to tell): the cause becomes rank 0 while the job tears down.
TEST_F(JobManagerTest, TheCauseIsTheRankThatDiedFirstNotTheFirstReport) {
  auto a = AddAgent("h1", 1);
  auto b = AddAgent("h2", 1);
  const std::string id = Submit(2);
  Event(a, id, 0, RankState::kRunning);
  Event(b, id, 1, RankState::kRunning);
  auto exit = [&](const std::shared_ptr<FakeLink>& link, int rank, int code, int64_t time_ms) {
    RankEventReport e;
    e.job_id = id;
    e.rank = rank;
    e.state = RankState::kExited;
    e.exit_code = code;
    e.time_ms = time_ms;
    e.stderr_tail = "tail of " + std::to_string(rank);
    jobs_->OnRankEvent(Id(link), e);
  };
  exit(b, 1, 1, 2000);  // "connection reset by rank 0"
  JobStatus st = Get(id);
  EXPECT_EQ(st.failure.rank, 1);
  exit(a, 0, 7, 1000);
  st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_EQ(st.failure.rank, 0);
  EXPECT_EQ(st.failure.message, "rank 0 on h1 exited with code 7");
  EXPECT_EQ(st.failure.stderr_tail, "tail of 0");
  EXPECT_EQ(st.exit_code, 7);
  EXPECT_EQ(st.reason, "rank 0 on h1 exited with code 7");
}

TEST_F(JobManagerTest, ALaterDeathDoesNotReplaceTheCause) {
  auto a = AddAgent("h1", 2);
  const std::string id = Submit(2);
  Event(a, id, 0, RankState::kRunning);
  Event(a, id, 1, RankState::kRunning);
  RankEventReport e;
  e.job_id = id;
  e.state = RankState::kExited;
  e.rank = 0;
  e.exit_code = 3;
  e.time_ms = 1000;
  jobs_->OnRankEvent(Id(a), e);
  e.rank = 1;
  e.exit_code = 1;
  e.time_ms = 1500;
  jobs_->OnRankEvent(Id(a), e);
  EXPECT_EQ(Get(id).failure.rank, 0);
  EXPECT_EQ(Get(id).exit_code, 3);
}

}  // namespace
}  // namespace hvd::launcherd
