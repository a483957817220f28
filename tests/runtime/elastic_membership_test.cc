// runtime/core/elastic.h: how an elastic worker reads the launcher's membership from the
// rendezvous store and how the ranks of a generation agree whether it formed or was superseded.
// Ranks are threads over a memory store scoped like the runtime's (job/attempt prefix); the
// launcher is the test, writing generations as launcherd's PublishMembershipLocked does.
#include "core/elastic.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/rendezvous_keys.h"
#include "rendezvous/store.h"
#include "testutil/expect.h"

namespace hvd::runtime::core {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A memory store and the attempt-scoped view the runtime reads the membership through.
struct AttemptStore {
  std::unique_ptr<rendezvous::Store> base = rendezvous::NewMemoryStore();
  std::unique_ptr<rendezvous::Store> attempt =
      rendezvous::NewPrefixStore(base::AttemptScope("j1", 0), base.get());

  // The launcher's order: the generation's workers, then the newest number.
  void Publish(int64_t g, const std::string& workers) {
    ASSERT_TRUE(attempt->Set(base::ElasticGenerationKey(g), workers).ok());
    ASSERT_TRUE(attempt->Set(base::ElasticLatestKey(), std::to_string(g)).ok());
  }
};

// The store of generation g's session-th meeting, over `st`'s.
std::unique_ptr<rendezvous::Store> MeetingStore(AttemptStore& st, int64_t g, int session) {
  return rendezvous::NewPrefixStore(ElasticScope(base::AttemptScope("j1", 0), g, session),
                                    st.base.get());
}

TEST(ElasticMembershipTest, WorkersParseAndFormat) {
  std::vector<int> w;
  ASSERT_TRUE(base::ParseElasticWorkers("3,0,5", &w).ok());
  EXPECT_EQ(w, (std::vector<int>{3, 0, 5}));
  EXPECT_EQ(base::FormatElasticWorkers(w), "3,0,5");
  ASSERT_TRUE(base::ParseElasticWorkers("7", &w).ok());
  EXPECT_EQ(w, (std::vector<int>{7}));
  ASSERT_TRUE(base::ParseElasticWorkers("1048576", &w).ok());
  EXPECT_EQ(base::FormatElasticWorkers({}), "");
  EXPECT_EQ(base::FormatElasticWorkers({0, 12}), "0,12");
  for (const char* bad : {"", ",", "1,", ",1", "1,,2", "a", "1,b", "-1", "1.5", "1048577",
                          "99999999999999999999", "1;2"}) {
    SCOPED_TRACE(bad);
    Status s = base::ParseElasticWorkers(bad, &w);
    ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
    if (*bad) {
      EXPECT_HAS(s.message(), std::string("\"") + bad + "\"");
    }
  }
  EXPECT_HAS(base::ParseElasticWorkers("", &w).message(), "empty");
}

TEST(ElasticMembershipTest, FindMembershipFindsTheWorkersRank) {
  AttemptStore st;
  st.Publish(0, "0,1,2,3");
  st.Publish(1, "0,2,3");
  Membership m;
  ASSERT_TRUE(FindMembership(*st.attempt, 3, Clock::now() + 5s, &m).ok());
  EXPECT_EQ(m.generation, 1);  // the newest
  EXPECT_EQ(m.workers, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(m.rank, 2);
  // A second session of this process in the same generation meets under keys of its own.
  Membership again;
  ASSERT_TRUE(FindMembership(*st.attempt, 0, Clock::now() + 5s, &again).ok());
  EXPECT_EQ(again.rank, 0);
  EXPECT_EQ(again.session, m.session + 1);
}

TEST(ElasticMembershipTest, FindMembershipWaitsForAGenerationNamingTheWorker) {
  AttemptStore st;
  // No generation yet, then generation 5 leaving worker 4 out (a restarted worker racing the
  // launcher), then 6 naming it.
  std::thread launcher([&] {
    std::this_thread::sleep_for(50ms);
    st.Publish(5, "0,1");
    std::this_thread::sleep_for(50ms);
    st.Publish(6, "0,4,1");
  });
  Membership m;
  const auto start = Clock::now();
  Status s = FindMembership(*st.attempt, 4, start + 10s, &m);
  launcher.join();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(m.generation, 6);
  EXPECT_EQ(m.rank, 1);
  EXPECT_EQ(m.workers, (std::vector<int>{0, 4, 1}));
  EXPECT_LT(Clock::now() - start, 5s);  // woken by the publication, not by the deadline
}

TEST(ElasticMembershipTest, FindMembershipSaysWhenTheWorkerIsLeftOut) {
  AttemptStore st;
  st.Publish(0, "0,1,2");
  st.Publish(1, "0,2");
  Membership m;
  const auto start = Clock::now();
  Status s = FindMembership(*st.attempt, 1, start + 200ms, &m);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_HAS(s.message(), "elastic generation 1 (workers 0,2) does not include worker 1");
  EXPECT_HAS(s.message(), "HVD_ELASTIC_TIMEOUT_SECONDS");
  EXPECT_LT(Clock::now() - start, 5s);

  AttemptStore empty;
  s = FindMembership(*empty.attempt, 0, Clock::now() + 100ms, &m);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_HAS(s.message(), "no elastic membership");
  EXPECT_HAS(s.message(), base::ElasticLatestKey());

  AttemptStore garbled;
  ASSERT_TRUE(garbled.attempt->Set(base::ElasticLatestKey(), "x").ok());
  EXPECT_EQ(FindMembership(*garbled.attempt, 0, Clock::now() + 100ms, &m).code(),
            StatusCode::kInvalidArgument);
  garbled.Publish(0, "0,zz");
  s = FindMembership(*garbled.attempt, 0, Clock::now() + 100ms, &m);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(s.message(), "\"0,zz\"");
}

TEST(ElasticMembershipTest, LatestAndGenerationWorkers) {
  AttemptStore st;
  std::vector<int> w;
  EXPECT_EQ(GenerationWorkers(*st.attempt, 0, &w).code(), StatusCode::kNotFound);
  st.Publish(0, "1,2");
  st.Publish(1, "2");
  int64_t g = -1;
  ASSERT_TRUE(LatestGeneration(*st.attempt, Clock::now() + 1s, &g).ok());
  EXPECT_EQ(g, 1);
  ASSERT_TRUE(GenerationWorkers(*st.attempt, 0, &w).ok());
  EXPECT_EQ(w, (std::vector<int>{1, 2}));
}

TEST(ElasticMembershipTest, EachGenerationAndSessionMeetsApart) {
  const std::string a = base::AttemptScope("j1", 0);
  EXPECT_EQ(ElasticScope(a, 0, 0), a);  // the first meeting: where the launcher watches
  EXPECT_EQ(ElasticScope(a, 0, 1), a + "/elastic/0/init/1");
  EXPECT_EQ(ElasticScope(a, 3, 0), a + "/elastic/3/init/0");
  EXPECT_EQ(ElasticScope(a, 3, 2), a + "/elastic/3/init/2");
  EXPECT_NE(ElasticScope(a, 1, 0), ElasticScope(a, 0, 1));
  // Never a fixed job's re-Init scope.
  EXPECT_NE(ElasticScope(a, 0, 1), base::IncarnationScope(a, 1));
}

// What hvd::ElasticCommitted writes: the launcher reads the worker's id and the
// generation from it (launcherd/job_shrink.cc holds off a shrink until rank 0 has committed).
TEST(ElasticMembershipTest, NoteCommittedNamesTheWorkerAndItsGeneration) {
  AttemptStore st;
  Membership m;
  m.generation = 4;
  m.workers = {0, 3, 7};
  m.rank = 2;
  ASSERT_TRUE(NoteCommitted(*st.attempt, m).ok());
  std::string v;
  ASSERT_TRUE(st.attempt->Get("committed/7", &v).ok());
  EXPECT_EQ(v, "4");
  base::RankKeyParts k;
  ASSERT_TRUE(base::ParseRankKey(base::AttemptScope("j1", 0) + "/committed/7", &k).ok());
  EXPECT_EQ(k.kind, base::RankKeyKind::kCommitted);
  EXPECT_EQ(k.rank, 7);
  m.rank = -1;  // not a member: nothing to say
  EXPECT_EQ(NoteCommitted(*st.attempt, m).code(), StatusCode::kFailedPrecondition);
}

TEST(ElasticMembershipTest, OnlyRemovedIsHorovodsSkipSync) {
  EXPECT_TRUE(OnlyRemoved({0, 1, 2, 3}, {0, 2, 3}));
  EXPECT_TRUE(OnlyRemoved({0, 1, 2}, {2}));
  EXPECT_FALSE(OnlyRemoved({0, 1, 2}, {0, 1, 2}));     // nothing changed
  EXPECT_FALSE(OnlyRemoved({0, 1, 2}, {0, 1, 2, 3}));  // added
  EXPECT_FALSE(OnlyRemoved({0, 1, 2}, {0, 3}));        // removed and added
}

TEST(ElasticMembershipTest, AnIncompleteMeetingKeepsWaitingUntilSuperseded) {
  AttemptStore st;
  st.Publish(2, "0,1,2");
  auto meeting =
      rendezvous::NewPrefixStore(ElasticScope(base::AttemptScope("j1", 0), 2, 0), st.base.get());
  bool decided = true, formed = true;
  ASSERT_TRUE(DecideMeeting(*st.attempt, *meeting, 2, false, 1s, &decided, &formed).ok());
  EXPECT_FALSE(decided);  // generation 3 is not published: wait on
  // Asking decided nothing for the others: a rank that then sees everyone decides "formed".
  ASSERT_TRUE(DecideMeeting(*st.attempt, *meeting, 2, true, 1s, &decided, &formed).ok());
  EXPECT_TRUE(decided);
  EXPECT_TRUE(formed);

  auto next =
      rendezvous::NewPrefixStore(ElasticScope(base::AttemptScope("j1", 0), 3, 0), st.base.get());
  st.Publish(3, "0,2");
  // Generation 4 does not exist: an incomplete meeting of 3 waits.
  ASSERT_TRUE(DecideMeeting(*st.attempt, *next, 3, false, 1s, &decided, &formed).ok());
  EXPECT_FALSE(decided);
  // A rank of generation 2 still asking (it missed the decision) reads the same outcome.
  ASSERT_TRUE(DecideMeeting(*st.attempt, *meeting, 2, false, 1s, &decided, &formed).ok());
  EXPECT_TRUE(decided);
  EXPECT_TRUE(formed);
}

TEST(ElasticMembershipTest, ASupersededMeetingIsDecidedSo) {
  AttemptStore st;
  st.Publish(0, "0,1,2");
  st.Publish(1, "0,2");
  auto meeting =
      rendezvous::NewPrefixStore(ElasticScope(base::AttemptScope("j1", 0), 0, 0), st.base.get());
  bool decided = false, formed = true;
  ASSERT_TRUE(DecideMeeting(*st.attempt, *meeting, 0, false, 1s, &decided, &formed).ok());
  EXPECT_TRUE(decided);
  EXPECT_FALSE(formed);
  // A rank that saw every member arrive, but asked second, follows the first.
  ASSERT_TRUE(DecideMeeting(*st.attempt, *meeting, 0, true, 1s, &decided, &formed).ok());
  EXPECT_TRUE(decided);
  EXPECT_FALSE(formed);
}

// The decider died between taking the counter and writing the outcome: the meeting cannot form
// (it was a member), so the others count it as superseded and meet again, instead of waiting out
// the elastic timeout.
TEST(ElasticMembershipTest, TheDecidersDeathSupersedesTheMeetingWithoutAHang) {
  AttemptStore st;
  st.Publish(0, "0,1");
  auto meeting =
      rendezvous::NewPrefixStore(ElasticScope(base::AttemptScope("j1", 0), 0, 0), st.base.get());
  int64_t n = 0;
  ASSERT_TRUE(meeting->Add("decide", 1, &n).ok());  // a rank counted itself, then died
  bool decided = true, formed = true;
  const auto start = Clock::now();
  decided = false;
  Status s = DecideMeeting(*st.attempt, *meeting, 0, true, 150ms, &decided, &formed);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(decided);
  EXPECT_FALSE(formed);
  EXPECT_LT(Clock::now() - start, 5s);
}

// Ranks racing: some saw every member arrive, others timed out a slice just before the last came
// while the launcher published the next generation. Whatever the order, all decide the same.
TEST(ElasticMembershipTest, RacingRanksAllAgreeOnOneOutcome) {
  constexpr int kRounds = 200;
  constexpr int kRanks = 6;
  int formed_rounds = 0, superseded_rounds = 0;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    AttemptStore st;
    st.Publish(0, "0,1,2,3,4,5");
    st.Publish(1, "0,1,2,3,4");
    auto meeting =
        rendezvous::NewPrefixStore(ElasticScope(base::AttemptScope("j1", 0), 0, 0), st.base.get());
    std::atomic<bool> go{false};
    std::vector<Status> status(kRanks);
    std::vector<int> decided(kRanks, 0), formed(kRanks, 0);
    std::vector<std::thread> ranks;
    for (int r = 0; r < kRanks; ++r) {
      ranks.emplace_back([&, r] {
        while (!go.load()) std::this_thread::yield();
        // Odd ranks saw the meeting complete; even ones did not (their order varies by round).
        const bool complete = (r + round) % 2 == 1;
        bool d = false, f = false;
        status[r] = DecideMeeting(*st.attempt, *meeting, 0, complete, 5s, &d, &f);
        decided[r] = d;
        formed[r] = f;
      });
    }
    go = true;
    for (std::thread& t : ranks) t.join();
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r].ToString();
      ASSERT_TRUE(decided[r]) << "rank " << r;
      ASSERT_EQ(formed[r], formed[0]) << "rank " << r << " disagrees with rank 0";
    }
    (formed[0] ? formed_rounds : superseded_rounds)++;
  }
  // Both outcomes are possible; say what the race gave, it must not matter.
  std::cout << "formed " << formed_rounds << ", superseded " << superseded_rounds << " of "
            << kRounds << " rounds\n";
}

TEST(ElasticMembershipTest, AWorkerRanWithButAbsentFromTheMeetingIsReportedOnceAfterTheWait) {
  AttemptStore st;
  std::unique_ptr<rendezvous::Store> meeting = MeetingStore(st, 3, 1);
  Membership m;
  m.generation = 3;
  m.workers = {0, 2, 5, 9};  // 9 is new to the job: not one this worker ran with
  m.rank = 0;
  ASSERT_TRUE(meeting->Set(base::RankKey(base::RankKeyKind::kHost, 0), "me").ok());
  ASSERT_TRUE(meeting->Set(base::RankKey(base::RankKeyKind::kHost, 1), "worker 2").ok());
  const std::string key = base::RankKey(base::RankKeyKind::kAbsent, 0);
  std::string v;

  AbsenceReporter early(st.attempt.get(), m, 0, {0, 2, 5}, 1h);
  ASSERT_TRUE(early.Check(*meeting).ok());
  EXPECT_EQ(st.attempt->Get(key, &v).code(), StatusCode::kNotFound);  // not waited long enough

  AbsenceReporter first(st.attempt.get(), m, 0, {}, 0ms);  // the job's first meeting
  ASSERT_TRUE(first.Check(*meeting).ok());
  EXPECT_EQ(st.attempt->Get(key, &v).code(), StatusCode::kNotFound);

  AbsenceReporter r(st.attempt.get(), m, 0, {0, 2, 5}, 0ms);
  ASSERT_TRUE(r.Check(*meeting).ok());
  ASSERT_TRUE(st.attempt->Get(key, &v).ok());
  base::ElasticAbsence a;
  ASSERT_TRUE(base::ParseElasticAbsence(v, &a).ok()) << v;
  EXPECT_EQ(a.generation, 3);
  EXPECT_EQ(a.workers, std::vector<int>{5});
  // The same missing set is not written again.
  ASSERT_TRUE(st.attempt->Set(key, "").ok());
  ASSERT_TRUE(r.Check(*meeting).ok());
  ASSERT_TRUE(st.attempt->Get(key, &v).ok());
  EXPECT_EQ(v, "");
  ASSERT_TRUE(meeting->Set(base::RankKey(base::RankKeyKind::kHost, 2), "worker 5").ok());
  ASSERT_TRUE(r.Check(*meeting).ok());  // everyone it ran with arrived: nothing to say
  ASSERT_TRUE(st.attempt->Get(key, &v).ok());
  EXPECT_EQ(v, "");
}

// Who came to a superseded meeting is expected at the next one, as those it formed with are.
TEST(ElasticMembershipTest, WhoCameToASupersededMeetingIsExpectedAtTheNext) {
  AttemptStore st;
  std::unique_ptr<rendezvous::Store> meeting = MeetingStore(st, 1, 0);
  Membership m;
  m.generation = 1;
  m.workers = {0, 3, 4};
  ASSERT_TRUE(meeting->Set(base::RankKey(base::RankKeyKind::kHost, 0), "me").ok());
  ASSERT_TRUE(meeting->Set(base::RankKey(base::RankKeyKind::kHost, 1), "worker 3").ok());
  FormedWith() = {0, 1};
  MetSinceFormed().clear();
  ASSERT_TRUE(NoteWhoCame(*meeting, m).ok());
  EXPECT_EQ(MetSinceFormed(), (std::vector<int>{0, 3}));  // 4 never came
  ASSERT_TRUE(NoteWhoCame(*meeting, m).ok());             // noted once
  EXPECT_EQ(ExpectedAtMeetings(), (std::vector<int>{0, 1, 3}));
  FormedWith().clear();
  MetSinceFormed().clear();
}

}  // namespace
}  // namespace hvd::runtime::core
