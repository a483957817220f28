// The job table across launcher restarts: the SQLite job store, and a JobManager restored from it
// reconciling with agents that come back (or do not).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdlib>

#include "launcherd/job_store.h"
#include "tests/launcherd/job_manager_fixture.h"
#include "testutil/expect.h"

namespace hvd::launcherd {
namespace {

class JobRecovery : public JobManagerFixture {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hvd_job_store_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(JobStore::Open(dir_, &db_).ok());
    Reset(WithStore());
  }
  void TearDown() override {
    jobs_.reset();
    db_.reset();
    (void)std::system(("rm -rf " + dir_).c_str());
  }
  JobManagerOptions WithStore() {
    JobManagerOptions o = Options();
    o.job_store = db_.get();
    o.client_lease = 24h;
    return o;
  }
  // What a launcher restarted on the same state dir does: a new registry, a new manager.
  std::vector<AgentInfo> Restart() {
    jobs_.reset();
    db_.reset();
    EXPECT_TRUE(JobStore::Open(dir_, &db_).ok());
    Reset(WithStore());
    std::vector<AgentInfo> expected;
    Status s = jobs_->Restore(&expected);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return expected;
  }
  std::string RunningJob(const std::shared_ptr<FakeLink>& a, int np) {
    JobSpec spec = Spec(np);
    spec.start_timeout_ms = 0;
    const std::string id = Submit(spec);
    for (int r = 0; r < np; ++r) Event(a, id, r, RankState::kRunning);
    return id;
  }
  std::string dir_;
  std::unique_ptr<JobStore> db_;
};

TEST_F(JobRecovery, TheStoreKeepsEveryFieldOfARecord) {
  auto a = AddAgent("h1", 2);
  const std::string id = RunningJob(a, 2);
  Event(a, id, 1, RankState::kExited, 3, 0, "boom");
  std::vector<StoredJob> stored;
  ASSERT_TRUE(db_->LoadAll(&stored).ok());
  ASSERT_EQ(stored.size(), 1u);
  const JobStatus& st = stored[0].status;
  EXPECT_EQ(st.id, id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_EQ(st.exit_code, 3);
  EXPECT_EQ(st.failure.message, "rank 1 on h1 exited with code 3");
  EXPECT_EQ(st.failure.stderr_tail, "boom");
  EXPECT_EQ(st.spec.argv, (std::vector<std::string>{"./train", "--lr", "0.1"}));
  EXPECT_EQ(st.spec.start_timeout_ms, 0);
  EXPECT_EQ(st.spec.kill_grace_ms, -1);  // unset stays unset
  ASSERT_EQ(st.ranks.size(), 2u);
  EXPECT_EQ(st.ranks[1].placement.agent_id, Id(a));
  EXPECT_EQ(st.ranks[1].exit_code, 3);
}

TEST_F(JobRecovery, EndedJobsComeBackAsTheyEnded) {
  auto a = AddAgent("h1", 2);
  const std::string id = RunningJob(a, 1);
  Event(a, id, 0, RankState::kExited, 0);
  ASSERT_EQ(Get(id).state, JobState::kSucceeded);
  EXPECT_TRUE(Restart().empty());  // nothing runs: no agent to wait for
  const JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kSucceeded);
  EXPECT_EQ(st.reason, "its one rank exited with code 0");
}

TEST_F(JobRecovery, ARunningJobContinuesWhenItsAgentComesBackRunningIt) {
  auto a = AddAgent("h1", 2);
  const std::string agent_id = Id(a);
  const std::string id = RunningJob(a, 2);
  const std::vector<AgentInfo> expected = Restart();
  ASSERT_EQ(expected.size(), 1u);
  EXPECT_EQ(expected[0].id, agent_id);
  EXPECT_EQ(expected[0].host, "h1");
  EXPECT_EQ(Get(id).state, JobState::kRunning);
  // The secret still opens the job's keys (a rank may Init again).
  std::string prefix;
  std::vector<StoredJob> stored;
  ASSERT_TRUE(db_->LoadAll(&stored).ok());
  EXPECT_TRUE(jobs_->ResolveSecret(stored[0].secret, &prefix));
  jobs_->OnHeartbeat(agent_id, {id});
  EXPECT_EQ(Get(id).state, JobState::kRunning);
  // It keeps working as before: its ranks end, it succeeds.
  RankEventReport e;
  e.job_id = id;
  e.state = RankState::kExited;
  for (int r : {0, 1}) {
    e.rank = r;
    jobs_->OnRankEvent(agent_id, e);
  }
  EXPECT_EQ(Get(id).state, JobState::kSucceeded);
}

TEST_F(JobRecovery, AJobWhoseRanksVanishedDuringTheRestartFailsNamingThem) {
  auto a = AddAgent("h1", 2);
  const std::string agent_id = Id(a);
  const std::string id = RunningJob(a, 2);
  Restart();
  jobs_->OnHeartbeat(agent_id, {});  // back, and no longer running it
  const JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_HAS(st.failure.message, "ranks 0, 1 on h1 ended while agent " + agent_id +
                                     " was out of touch with the launcher");
  EXPECT_EQ(st.ranks[0].state, RankState::kKilled);
}

// No launcher restart: the agent itself restarted (same id from its state dir) and runs nothing.
TEST_F(JobRecovery, AnAgentThatComesBackWithoutItsRanksFailsTheirJob) {
  auto a = AddAgent("h1", 2);
  const std::string agent_id = Id(a);
  const std::string id = RunningJob(a, 2);
  jobs_->OnHeartbeat(agent_id, {id});  // before: it runs the job
  EXPECT_EQ(Get(id).state, JobState::kRunning);
  jobs_->OnAgentRegistered(agent_id);  // it registers again...
  jobs_->OnHeartbeat(agent_id, {});    // ...without the job
  const JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_HAS(st.failure.message, "ranks 0, 1 on h1 ended while agent " + agent_id);
  // A reconnect that still runs it changes nothing.
  const std::string other = RunningJob(a, 2);
  jobs_->OnAgentRegistered(agent_id);
  jobs_->OnHeartbeat(agent_id, {other});
  EXPECT_EQ(Get(other).state, JobState::kRunning);
}

TEST_F(JobRecovery, AnExitReportedAfterTheRestartKeepsItsOwnCause) {
  auto a = AddAgent("h1", 2);
  const std::string agent_id = Id(a);
  const std::string id = RunningJob(a, 2);
  Restart();
  // The agent's kept events come before its first heartbeat.
  RankEventReport e;
  e.job_id = id;
  e.rank = 0;
  e.state = RankState::kExited;
  e.exit_code = 9;
  jobs_->OnRankEvent(agent_id, e);
  jobs_->OnHeartbeat(agent_id, {id});
  const JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_EQ(st.failure.message, "rank 0 on h1 exited with code 9");
  EXPECT_EQ(st.exit_code, 9);
}

TEST_F(JobRecovery, OutputAfterARestartIsNumberedPastEverythingBefore) {
  auto a = AddAgent("h1", 1);
  const std::string agent_id = Id(a);
  const std::string id = RunningJob(a, 1);
  jobs_->OnOutput(agent_id, id, {OutputLine{0, false, "before", -1}});
  Restart();
  jobs_->OnOutput(agent_id, id, {OutputLine{0, false, "after", -1}});
  // A watcher that saw "before" (seq 0) resumes from seq 1 and gets "after".
  WatchCursor cursor;
  std::vector<JobEvent> events;
  bool done = false;
  ASSERT_TRUE(jobs_->NextEvents(id, 1, false, 0ms, &cursor, &events, &done).ok());
  // Before the first renumbered line, the note that its seq jumps (hvdrun would count the gap
  // as ~10^15 lines dropped), once.
  std::vector<std::string> lines;
  for (const JobEvent& e : events) {
    if (e.kind == JobEvent::Kind::kOutput) lines.push_back(e.output.text);
    if (e.kind == JobEvent::Kind::kProgress &&
        e.progress.rfind(control::kOutputRenumberedNote, 0) == 0) {
      lines.push_back("(renumbered)");
    }
  }
  EXPECT_EQ(lines, (std::vector<std::string>{"(renumbered)", "after"}));
  jobs_->OnOutput(agent_id, id, {OutputLine{0, false, "later", -1}});
  events.clear();
  ASSERT_TRUE(jobs_->NextEvents(id, 1, false, 0ms, &cursor, &events, &done).ok());
  for (const JobEvent& e : events) {
    EXPECT_FALSE(e.kind == JobEvent::Kind::kProgress &&
                 e.progress.rfind(control::kOutputRenumberedNote, 0) == 0);
  }
}

TEST_F(JobRecovery, ANewerSchemaIsRefusedNotMisread) {
  db_.reset();
  jobs_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ + "/jobs.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  Status s = JobStore::Open(dir_, &db_);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_HAS(s.message(), "written by a newer hvd-launcherd (schema 99");
}

TEST_F(JobRecovery, AnUnwritableStateDirIsAClearError) {
  std::unique_ptr<JobStore> store;
  Status s = JobStore::Open("/proc/hvd-no-such-dir/state", &store);
  EXPECT_FALSE(s.ok());
  EXPECT_HAS(s.message(), "--state-dir /proc/hvd-no-such-dir/state");
}

}  // namespace
}  // namespace hvd::launcherd
