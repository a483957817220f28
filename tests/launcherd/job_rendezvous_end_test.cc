// A job's end, as JobManager decides it, ends its ranks' rendezvous waits on the runtime's endpoint
// (KvServer) at once, with an error that says so; a restart ends the previous attempt's waits only.
// Real JobManager (fake agent links), real endpoint on 127.0.0.1, the runtime's own client.
#include <gtest/gtest.h>

#include <thread>

#include "launcherd/job_manager.h"
#include "launcherd/kv_server.h"
#include "rendezvous/store.h"
#include "tests/launcherd/job_manager_fixture.h"

namespace hvd::launcherd {
namespace {

using namespace std::chrono_literals;
using runtime::rendezvous::OpenStore;
using runtime::rendezvous::Store;
using Clock = std::chrono::steady_clock;

bool Has(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

class JobRendezvousEnd : public JobManagerFixture {
 protected:
  void SetUp() override {
    SecretResolver resolve = [this](const std::string& secret, std::string* prefix) {
      return jobs_->ResolveSecret(secret, prefix);
    };
    ASSERT_TRUE(KvServer::Start("127.0.0.1:0", &store_, resolve, &server_).ok());
    setenv("HVD_RENDEZVOUS_TIMEOUT_SECONDS", "5", 1);
  }
  void TearDown() override {
    server_->Stop();
    unsetenv("HVD_JOB_SECRET");
    unsetenv("HVD_RENDEZVOUS_TIMEOUT_SECONDS");
  }
  // The runtime's store for a rank of the job whose start command is `c`.
  std::unique_ptr<Store> RankStore(const StartRankCommand& c) {
    setenv("HVD_JOB_SECRET", c.env.at("HVD_JOB_SECRET").c_str(), 1);
    std::unique_ptr<Store> s;
    Status st = OpenStore("hvd://" + server_->address(), &s);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return s;
  }
  bool PendingWaits(uint64_t n) {
    for (int i = 0; i < 300 && store_.stats().pending_waits != n; ++i) {
      std::this_thread::sleep_for(10ms);
    }
    return store_.stats().pending_waits == n;
  }

  std::unique_ptr<KvServer> server_;
};

TEST_F(JobRendezvousEnd, TheJobsEndFailsItsPendingWaits) {
  auto a = AddAgent("h1", 2);
  const std::string id = Submit(2);
  ASSERT_EQ(a->starts.size(), 2u);
  std::unique_ptr<Store> s = RankStore(a->starts[0]);
  ASSERT_TRUE(s);
  Status waited;
  Clock::time_point returned;
  std::thread waiter([&] {
    waited = s->Wait({"job/" + id + "/attempt/0/never"}, 60s);
    returned = Clock::now();
  });
  ASSERT_TRUE(PendingWaits(1));

  Event(a, id, 0, RankState::kRunning);
  Event(a, id, 1, RankState::kRunning);
  Event(a, id, 1, RankState::kExited, 3);
  Event(a, id, 0, RankState::kKilled);  // the last rank gone: the job is over
  const auto ended = Clock::now();
  waiter.join();
  EXPECT_EQ(Get(id).state, JobState::kFailed);
  EXPECT_LT(returned - ended, 1s);
  EXPECT_EQ(waited.code(), StatusCode::kAborted) << waited.ToString();
  EXPECT_TRUE(Has(waited, "job " + id + " ended") && Has(waited, "WAIT")) << waited.message();
  EXPECT_TRUE(PendingWaits(0));
  Status later = s->Set("job/" + id + "/attempt/0/x", "y");
  EXPECT_TRUE(Has(later, "has ended")) << later.ToString();
  EXPECT_EQ(store_.stats().keys, 0u);
}

TEST_F(JobRendezvousEnd, ARestartEndsThePreviousAttemptsWaitsOnly) {
  auto a = AddAgent("h1", 2);
  JobSpec spec = Spec(2);
  spec.max_restarts = 1;
  spec.start_timeout_ms = 0;
  const std::string id = Submit(spec);
  ASSERT_EQ(a->starts.size(), 2u);
  std::unique_ptr<Store> s = RankStore(a->starts[0]);
  ASSERT_TRUE(s);
  Status waited;
  std::thread waiter([&] { waited = s->Wait({"job/" + id + "/attempt/0/never"}, 60s); });
  ASSERT_TRUE(PendingWaits(1));
  Event(a, id, 0, RankState::kRunning);
  Event(a, id, 1, RankState::kRunning);
  Event(a, id, 1, RankState::kExited, 3);
  Event(a, id, 0, RankState::kKilled);
  waiter.join();
  EXPECT_EQ(Get(id).attempt, 1);
  EXPECT_EQ(waited.code(), StatusCode::kAborted) << waited.ToString();
  EXPECT_TRUE(Has(waited, "attempt 0 of job " + id + " ended")) << waited.message();
  // The job lives on: its secret still opens its keys, for the next attempt.
  EXPECT_TRUE(s->Set("job/" + id + "/attempt/1/host/0", "x").ok());
}

}  // namespace
}  // namespace hvd::launcherd
