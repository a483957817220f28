// Per-event work that does not grow with the job (issue 22): the job table's batched writes to the
// real SQLite job store (counted through a wrapper that passes every call on), and the Job's
// counts of live and cleanly exited ranks that replace a scan of every rank per event.
#include <gtest/gtest.h>

#include <cstdlib>

#include "launcherd/job.h"
#include "launcherd/job_store.h"
#include "tests/launcherd/job_manager_fixture.h"
#include "tests/launcherd/test_clock.h"

namespace hvd::launcherd {
namespace {

// The real store, with its writes counted: one PutMany is one transaction.
class CountingStore : public JobStore {
 public:
  explicit CountingStore(JobStore* real) : real_(real) {}
  Status Put(const StoredJob& job) override {
    ++transactions;
    ++rows;
    return real_->Put(job);
  }
  Status PutMany(const std::vector<StoredJob>& jobs) override {
    ++transactions;
    rows += jobs.size();
    return real_->PutMany(jobs);
  }
  Status Remove(const std::string& id) override { return real_->Remove(id); }
  Status LoadAll(std::vector<StoredJob>* out) override { return real_->LoadAll(out); }

  int transactions = 0;
  size_t rows = 0;

 private:
  JobStore* const real_;
};

class JobBatching : public JobManagerFixture {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hvd_job_batching_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(JobStore::Open(dir_, &db_).ok());
    counting_ = std::make_unique<CountingStore>(db_.get());
    JobManagerOptions o = Options();
    o.job_store = counting_.get();
    o.client_lease = 24h;
    Reset(o);
  }
  void TearDown() override {
    jobs_.reset();
    counting_.reset();
    db_.reset();
    (void)std::system(("rm -rf " + dir_).c_str());
  }
  // The job's record as the database holds it now.
  StoredJob Stored(const std::string& id) {
    std::vector<StoredJob> all;
    EXPECT_TRUE(db_->LoadAll(&all).ok());
    for (StoredJob& s : all) {
      if (s.status.id == id) return s;
    }
    ADD_FAILURE() << "job " << id << " is not in the store";
    return {};
  }
  static JobSpec NoTimeout(int np) {
    JobSpec spec = Spec(np);
    spec.start_timeout_ms = 0;
    return spec;
  }

  std::string dir_;
  std::unique_ptr<JobStore> db_;
  std::unique_ptr<CountingStore> counting_;
};

TEST_F(JobBatching, RankEventsAreWrittenAtTheNextFlushNotOneByOne) {
  constexpr int kNp = 64;
  auto a = AddAgent("h1", kNp);
  const std::string id = Submit(NoTimeout(kNp));
  ASSERT_EQ(Get(id).state, JobState::kStarting);
  EXPECT_EQ(Stored(id).status.state, JobState::kStarting);  // a state change is written at once

  // 64 starts: one write, when the job became RUNNING (with every rank in it).
  int before = counting_->transactions;
  for (int r = 0; r < kNp; ++r) Event(a, id, r, RankState::kRunning);
  EXPECT_EQ(counting_->transactions - before, 1);
  StoredJob s = Stored(id);
  EXPECT_EQ(s.status.state, JobState::kRunning);
  for (const RankStatus& r : s.status.ranks) EXPECT_EQ(r.state, RankState::kRunning);

  // 63 exits change no state: nothing written until the flush, which writes the job once.
  before = counting_->transactions;
  for (int r = 0; r + 1 < kNp; ++r) Event(a, id, r, RankState::kExited);
  EXPECT_EQ(counting_->transactions, before);
  EXPECT_EQ(Stored(id).status.ranks[0].state, RankState::kRunning);
  const size_t rows_before = counting_->rows;
  jobs_->Tick();
  EXPECT_EQ(counting_->transactions - before, 1);
  EXPECT_EQ(counting_->rows - rows_before, 1u);
  s = Stored(id);
  EXPECT_EQ(s.status.ranks[0].state, RankState::kExited);
  EXPECT_EQ(s.status.ranks[kNp - 1].state, RankState::kRunning);
  jobs_->Tick();  // nothing changed since: nothing written
  EXPECT_EQ(counting_->transactions - before, 1);

  // The job's end is durable as soon as it happens, without waiting for a flush.
  Event(a, id, kNp - 1, RankState::kExited);
  ASSERT_EQ(Get(id).state, JobState::kSucceeded);
  s = Stored(id);
  EXPECT_EQ(s.status.state, JobState::kSucceeded);
  EXPECT_EQ(s.status.ranks[kNp - 1].state, RankState::kExited);
  EXPECT_EQ(s.secret, "");  // finished: its secret is not kept
}

TEST_F(JobBatching, OneFlushWritesEveryChangedJobInOneTransaction) {
  auto a = AddAgent("h1", 6);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(Submit(NoTimeout(2)));
  const int before = counting_->transactions;
  const size_t rows_before = counting_->rows;
  for (const std::string& id : ids) {
    Event(a, id, 0, RankState::kRunning);  // still STARTING: rank 1 has not started
    Event(a, id, 0, RankState::kRunning);  // repeated: the same job is written once anyway
  }
  EXPECT_EQ(counting_->transactions, before);
  jobs_->Tick();
  EXPECT_EQ(counting_->transactions - before, 1);
  EXPECT_EQ(counting_->rows - rows_before, 3u);
  for (const std::string& id : ids) {
    const StoredJob s = Stored(id);
    EXPECT_EQ(s.status.state, JobState::kStarting);
    EXPECT_EQ(s.status.ranks[0].state, RankState::kRunning);
    EXPECT_EQ(s.status.ranks[0].pid, 1000);
  }
}

TEST_F(JobBatching, WhatIsStillUnwrittenIsWrittenWhenTheManagerGoes) {
  auto a = AddAgent("h1", 2);
  const std::string id = Submit(NoTimeout(2));
  Event(a, id, 0, RankState::kRunning);
  EXPECT_EQ(Stored(id).status.ranks[0].state, RankState::kStarting);
  jobs_.reset();  // the launcher stops (with a state dir: no Shutdown, the jobs go on)
  EXPECT_EQ(Stored(id).status.ranks[0].state, RankState::kRunning);
}

TEST_F(JobBatching, ShutdownWritesTheCancelledJobs) {
  auto a = AddAgent("h1", 2);
  const std::string id = Submit(NoTimeout(2));
  Event(a, id, 0, RankState::kRunning);
  jobs_->Shutdown("stopping");
  const StoredJob s = Stored(id);
  EXPECT_EQ(s.status.state, JobState::kCancelled);
  EXPECT_EQ(s.status.ranks[0].state, RankState::kRunning);  // its agent has yet to stop it
}

// --- The Job's rank counts.

std::unique_ptr<Job> JobWithRanks(int np) {
  auto job = testing::JobWithRanks(np, RankState::kStarting);
  EXPECT_EQ(job->state(), JobState::kStarting);
  return job;
}

RankEventReport Report(int rank, RankState state, int code = 0) {
  RankEventReport ev;
  ev.job_id = "j1";
  ev.rank = rank;
  ev.state = state;
  ev.exit_code = code;
  return ev;
}

const AgentConnected kAllConnected = [](const std::string&) { return true; };

TEST(JobRankCounts, FollowEveryRankEvent) {
  auto job = JobWithRanks(4);
  const Instant now = Instant::Now();
  EXPECT_TRUE(job->AnyRankLive());
  EXPECT_FALSE(job->AllRanksExitedZero());
  for (int r = 0; r < 4; ++r) {
    job->OnRankEvent(Report(r, RankState::kRunning), r < 2 ? "a" : "b", kAllConnected, now);
  }
  EXPECT_EQ(job->state(), JobState::kRunning);
  EXPECT_EQ(job->LiveRanksOn("a"), 2);
  for (int r = 0; r < 3; ++r) {
    job->OnRankEvent(Report(r, RankState::kExited), r < 2 ? "a" : "b", kAllConnected, now);
    EXPECT_TRUE(job->AnyRankLive());
    EXPECT_FALSE(job->AllRanksExitedZero());
  }
  // A repeated exit counts once.
  job->OnRankEvent(Report(0, RankState::kExited), "a", kAllConnected, now);
  EXPECT_EQ(job->state(), JobState::kRunning);
  job->OnRankEvent(Report(3, RankState::kExited), "b", kAllConnected, now);
  EXPECT_FALSE(job->AnyRankLive());
  EXPECT_EQ(job->LiveRanksOn("b"), 0);
  EXPECT_TRUE(job->AllRanksExitedZero());
  EXPECT_EQ(job->state(), JobState::kSucceeded);
  EXPECT_TRUE(job->Finish());
}

TEST(JobRankCounts, AFailedExitAndKilledRanksAreNotCleanExits) {
  auto job = JobWithRanks(4);
  const Instant now = Instant::Now();
  job->OnRankEvent(Report(0, RankState::kExited, 3), "a", kAllConnected, now);
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_TRUE(job->AnyRankLive());
  EXPECT_FALSE(job->Finish());  // ranks 1-3 still live
  EXPECT_EQ(job->LiveRanksOn("a"), 1);
  EXPECT_EQ(job->LiveRanksOn("b"), 2);
  EXPECT_EQ(job->KillRanksOnAgent("a", "gone", 1).size(), 1u);  // rank 1
  EXPECT_EQ(job->LiveRanksOn("a"), 0);
  EXPECT_TRUE(job->KillRanksOnAgent("a", "again", 1).empty());
  EXPECT_TRUE(job->AnyRankLive());
  EXPECT_EQ(job->KillRanksOnAgent("b", "gone", 1).size(), 2u);
  EXPECT_FALSE(job->AnyRankLive());
  EXPECT_FALSE(job->AllRanksExitedZero());
  EXPECT_TRUE(job->Finish());
}

TEST(JobRankCounts, RanksChangedFromOutsideAreCountedAfresh) {
  auto job = JobWithRanks(2);
  EXPECT_TRUE(job->AnyRankLive());
  // What the scheduler's start and a restore do: set the ranks directly, then say so.
  for (RankStatus& r : job->status.ranks) {
    r.state = RankState::kExited;
    r.exit_code = 0;
  }
  job->RanksReplaced();
  EXPECT_FALSE(job->AnyRankLive());
  EXPECT_EQ(job->LiveRanksOn("a"), 0);
  EXPECT_TRUE(job->AllRanksExitedZero());
  // More ranks than were counted: counted afresh even unannounced.
  RankStatus extra;
  extra.placement.rank = 2;
  extra.state = RankState::kRunning;
  extra.placement.agent_id = "c";
  job->status.ranks.push_back(extra);
  EXPECT_TRUE(job->AnyRankLive());
  EXPECT_EQ(job->LiveRanksOn("c"), 1);
  EXPECT_FALSE(job->AllRanksExitedZero());
}

}  // namespace
}  // namespace hvd::launcherd
