// The snapshot readers answer from (launcherd/jobs_snapshot.h), over a real JobManager: what it
// holds matches the manager's own answers, a client reads its own writes, a publish copies only
// the jobs that changed, and a reader is answered while the writer's lock is held.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "launcherd/jobs_snapshot.h"
#include "tests/launcherd/job_manager_fixture.h"

namespace hvd::launcherd {
namespace {

using namespace std::chrono_literals;

class JobsSnapshotTest : public JobManagerFixture {
 protected:
  // The snapshot once it shows what `done` wants. A reader publishes first when the manager's
  // lock is free; when it is held (the publisher thread building, on a loaded machine), the
  // reader answers from the last snapshot and the thread publishes within kPublishInterval.
  template <typename Done>
  std::shared_ptr<const JobsSnapshot> SnapshotWhen(Done done) {
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    std::shared_ptr<const JobsSnapshot> snap = jobs_->Snapshot();
    while (!done(*snap) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
      snap = jobs_->Snapshot();
    }
    return snap;
  }
  std::shared_ptr<const JobsSnapshot> SnapshotWhenJobIs(const std::string& id, JobState state) {
    return SnapshotWhen([&](const JobsSnapshot& s) {
      return s.Find(id) != nullptr && s.Find(id)->state == state;
    });
  }
};

TEST_F(JobsSnapshotTest, MatchesTheManagerAndReadsItsOwnWrites) {
  auto a = AddAgent("h1", 4);
  const std::string id = Submit(2);
  // Submit published before it returned.
  std::shared_ptr<const JobsSnapshot> snap = jobs_->Snapshot();
  ASSERT_NE(snap->Find(id), nullptr);
  EXPECT_EQ(snap->Find(id)->state, JobState::kStarting);
  EXPECT_EQ(snap->Find(id)->ranks.size(), 2u);
  ASSERT_EQ(snap->summaries.size(), 1u);
  EXPECT_TRUE(snap->summaries[0]->ranks.empty());
  EXPECT_EQ(snap->Find("no-such-job"), nullptr);

  Event(a, id, 0, RankState::kRunning);
  Event(a, id, 1, RankState::kRunning);
  snap = SnapshotWhenJobIs(id, JobState::kRunning);
  EXPECT_EQ(snap->Find(id)->state, JobState::kRunning);
  const JobCounts want = jobs_->Counts();
  EXPECT_EQ(snap->counts.jobs, want.jobs);
  EXPECT_EQ(snap->counts.ranks_running, 2);
  EXPECT_EQ(snap->counts.slots_in_use, want.slots_in_use);
  EXPECT_EQ(snap->counts.slots_in_use.at(Id(a)), 2);

  JobState state;
  ASSERT_TRUE(jobs_->Cancel(id, "test", &state).ok());
  snap = SnapshotWhenJobIs(id, JobState::kCancelled);
  EXPECT_EQ(snap->Find(id)->state, JobState::kCancelled);
  std::vector<JobStatus> list = jobs_->List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].reason, snap->summaries[0]->reason);
}

TEST_F(JobsSnapshotTest, APublishCopiesOnlyTheJobsThatChanged) {
  auto a = AddAgent("h1", 4);
  const std::string one = Submit(1);
  const std::string two = Submit(1);
  std::shared_ptr<const JobsSnapshot> before = jobs_->Snapshot();
  Event(a, two, 0, RankState::kRunning);
  std::shared_ptr<const JobsSnapshot> after = SnapshotWhen([&](const JobsSnapshot& s) {
    return s.jobs.size() == 2 && s.jobs[1]->ranks[0].state == RankState::kRunning;
  });
  ASSERT_GT(after->version, before->version);
  ASSERT_EQ(after->jobs.size(), 2u);
  EXPECT_EQ(after->jobs[0].get(), before->jobs[0].get()) << "job " << one << " was copied again";
  EXPECT_NE(after->jobs[1].get(), before->jobs[1].get());
  EXPECT_EQ(after->jobs[1]->ranks[0].state, RankState::kRunning);
  EXPECT_EQ(before->jobs[1]->ranks[0].state, RankState::kStarting);  // immutable once published
  // Nothing changed: a later snapshot (the publisher thread may have made one) shares both jobs.
  std::shared_ptr<const JobsSnapshot> later = jobs_->Snapshot();
  EXPECT_EQ(later->jobs[0].get(), after->jobs[0].get());
  EXPECT_EQ(later->jobs[1].get(), after->jobs[1].get());
}

// The publisher alone: Current() answers while a publish (the writer's lock) is held, and the
// thread publishes after a change at once, without a reader asking.
TEST(SnapshotPublisherTest, ReadersNeverWaitForAPublish) {
  std::atomic<int> publishes{0};
  std::atomic<bool> release{false};
  SnapshotPublisher* self = nullptr;
  JobsSnapshotBuilder builder;
  SnapshotPublisher publisher([&] {
    while (!release.load()) std::this_thread::sleep_for(1ms);  // a busy writer
    const uint64_t v = self->BeginBuild();
    self->Swap(builder.Build({}, v));
    ++publishes;
  });
  self = &publisher;
  publisher.Changed();  // wakes the thread, which now "holds the lock"
  std::this_thread::sleep_for(50ms);
  const auto t = std::chrono::steady_clock::now();
  std::shared_ptr<const JobsSnapshot> snap = publisher.Current();
  EXPECT_LT(std::chrono::steady_clock::now() - t, 20ms);
  EXPECT_TRUE(publisher.Stale(*snap));
  release = true;
  for (int i = 0; i < 200 && publisher.Stale(*publisher.Current()); ++i) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_FALSE(publisher.Stale(*publisher.Current()));
  EXPECT_EQ(publisher.Current()->version, 1u);
  EXPECT_EQ(publishes.load(), 1);
}

}  // namespace
}  // namespace hvd::launcherd
