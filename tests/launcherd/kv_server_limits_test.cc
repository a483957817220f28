// KvServer's bounds (issue 20, findings 1 and 3): what an unauthenticated or misbehaving peer can
// cost the launcher, per-job quotas, disconnected and orphaned waits, idle connections and the
// connection cap. Real endpoint on 127.0.0.1, raw protocol frames and the runtime's own client.
#include <sys/resource.h>

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "launcherd/kv_server.h"
#include "rendezvous/store.h"
#include "tests/launcherd/kv_test_util.h"

namespace hvd::launcherd {
namespace {

namespace kv = base::kv;
using kvtest::Contains;
using kvtest::Hello;
using kvtest::RawConn;
using runtime::rendezvous::OpenStore;
using runtime::rendezvous::Store;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Live jobs: a secret resolves while its job is in the set, as JobManager::ResolveSecret does.
class Jobs {
 public:
  Jobs() : live_{"j1", "j2"} {}
  SecretResolver Resolver() {
    return [this](const std::string& secret, std::string* prefix) {
      std::lock_guard<std::mutex> lock(mu_);
      if (secret.rfind("secret-", 0) != 0 || live_.count(secret.substr(7)) == 0) return false;
      *prefix = "job/" + secret.substr(7) + "/";
      return true;
    };
  }
  void End(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(id);
  }

 private:
  std::mutex mu_;
  std::set<std::string> live_;
};

// Polls `pred` every 10 ms for up to `limit`.
template <typename Pred>
bool Eventually(Pred pred, milliseconds limit = milliseconds(3000)) {
  const auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return pred();
}

kv::Request Wait(const std::string& key, int64_t timeout_ms) {
  kv::Request r;
  r.op = kv::Op::kWait;
  r.keys = {key};
  r.timeout_ms = timeout_ms;
  return r;
}

class KvServerLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("HVD_JOB_SECRET", "secret-j1", 1);
    setenv("HVD_RENDEZVOUS_TIMEOUT_SECONDS", "5", 1);
  }
  void Start(const KvServerOptions& options = KvServerOptions(),
             const KvLimits& limits = KvLimits()) {
    store_ = std::make_unique<KvStore>(limits);
    ASSERT_TRUE(
        KvServer::Start("127.0.0.1:0", store_.get(), jobs_.Resolver(), options, &server_).ok());
    url_ = "hvd://" + server_->address();
  }
  void TearDown() override {
    if (server_) server_->Stop();
    unsetenv("HVD_JOB_SECRET");
    unsetenv("HVD_RENDEZVOUS_TIMEOUT_SECONDS");
  }
  // An authenticated raw connection of job `id`.
  std::unique_ptr<RawConn> Authed(const std::string& id = "j1") {
    auto c = std::make_unique<RawConn>(server_->address());
    kv::Response resp;
    EXPECT_TRUE(c->Call(Hello("secret-" + id), &resp).ok());
    EXPECT_TRUE(resp.status.ok()) << resp.status.ToString();
    return c;
  }

  Jobs jobs_;
  std::unique_ptr<KvStore> store_;
  std::unique_ptr<KvServer> server_;
  std::string url_;
};

// Finding 1: 32 connections announcing a 64 MiB frame took the launcher from 21 MiB to 1.6 GiB.
TEST_F(KvServerLimitsTest, UnauthenticatedLengthHeadersAllocateNothing) {
  Start();
  const long before = kvtest::RssKiB();
  std::vector<std::unique_ptr<RawConn>> conns;
  for (int i = 0; i < 32; ++i) {
    conns.push_back(std::make_unique<RawConn>(server_->address()));
    ASSERT_TRUE(conns.back()->SendBytes(std::string("\x00\x00\x00\x04", 4)).ok());  // 64 MiB
  }
  std::this_thread::sleep_for(milliseconds(300));  // the old endpoint zero-filled 64 MiB by now
  const long grown = kvtest::RssKiB() - before;
  EXPECT_LT(grown, 4 * 1024) << "RSS grew by " << grown << " KiB";
  for (auto& c : conns) {
    kv::Response resp;
    ASSERT_TRUE(c->Read(kv::Op::kHello, &resp).ok());
    EXPECT_EQ(resp.status.code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(resp.status, "67108864 bytes") && Contains(resp.status, "4096 bytes"))
        << resp.status.message();
    EXPECT_TRUE(c->Closed());
  }
  EXPECT_TRUE(Eventually([&] { return server_->stats().connections == 0; }));
  EXPECT_EQ(server_->stats().buffered_bytes, 0u);
}

TEST_F(KvServerLimitsTest, AuthenticatedFramesValuesAndBytesInFlightAreBounded) {
  KvServerOptions o;
  o.max_buffered_bytes_per_job = 256 << 10;
  Start(o);
  auto big = Authed();
  ASSERT_TRUE(big->SendBytes(std::string("\x00\x00\x50\x00", 4)).ok());  // 5 MiB > 4 MiB
  kv::Response resp;
  ASSERT_TRUE(big->Read(kv::Op::kHello, &resp).ok());
  EXPECT_TRUE(Contains(resp.status, "5242880 bytes") && Contains(resp.status, "4 MiB"))
      << resp.status.message();
  EXPECT_TRUE(big->Closed());

  auto flight = Authed();  // 1 MiB announced: under the frame limit, over the job's 256 KiB
  ASSERT_TRUE(flight->SendBytes(std::string("\x00\x00\x10\x00", 4)).ok());
  ASSERT_TRUE(flight->Read(kv::Op::kHello, &resp).ok());
  EXPECT_EQ(resp.status.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(resp.status, "in flight") && Contains(resp.status, "job/j1/") &&
              Contains(resp.status, "262144 bytes"))
      << resp.status.message();
  EXPECT_TRUE(flight->Closed());
  EXPECT_TRUE(Eventually([&] { return server_->stats().buffered_bytes == 0; }));
}

TEST_F(KvServerLimitsTest, PerJobQuotasNameTheLimitAndTheJob) {
  KvLimits limits;
  limits.max_keys_per_job = 10;
  limits.max_bytes_per_job = 4096;
  Start(KvServerOptions(), limits);
  std::unique_ptr<Store> s;
  ASSERT_TRUE(OpenStore(url_, &s).ok());
  // A value over 1 MiB is refused by name; the connection stays usable.
  Status st = s->Set("job/j1/big", std::string((1 << 20) + 1, 'x'));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_TRUE(Contains(st, "1 MiB") && Contains(st, "job/j1/big")) << st.message();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(s->Set("job/j1/k" + std::to_string(i), "v").ok());
  st = s->Set("job/j1/one-too-many", "v");
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_TRUE(Contains(st, "quota of 10 keys of job j1")) << st.message();
  EXPECT_TRUE(s->Set("job/j1/k3", "replacing is fine").ok());
  st = s->Set("job/j1/k4", std::string(5000, 'x'));
  EXPECT_TRUE(Contains(st, "quota of 4096 bytes") && Contains(st, "job j1")) << st.message();
  EXPECT_EQ(s->Add("job/j1/counter", 1, nullptr).code(), StatusCode::kFailedPrecondition);

  setenv("HVD_JOB_SECRET", "secret-j2", 1);  // another job is not affected
  std::unique_ptr<Store> other;
  ASSERT_TRUE(OpenStore(url_, &other).ok());
  EXPECT_TRUE(other->Set("job/j2/a", "v").ok());
  store_->EraseScope("job/j1/");  // the job's end gives its quota back
  EXPECT_TRUE(s->Set("job/j1/after", "v").ok());
  EXPECT_EQ(store_->stats().keys, 2u);
}

// Finding 3: a waiter that disconnects must not keep a socket, a wait or a thread.
TEST_F(KvServerLimitsTest, DisconnectedWaiterIsFreedWithinASecond) {
  Start();
  auto c = Authed();
  ASSERT_TRUE(c->Send(kv::EncodeRequest(Wait("job/j1/never", 7 * 24 * 3600 * 1000LL))).ok());
  ASSERT_TRUE(Eventually([&] { return store_->stats().pending_waits == 1; }));
  EXPECT_EQ(server_->stats().waiting, 1u);
  const auto left = Clock::now();
  c->Close();
  ASSERT_TRUE(Eventually(
      [&] { return store_->stats().pending_waits == 0 && server_->stats().connections == 0; }));
  EXPECT_LT(Clock::now() - left, milliseconds(1000));
  EXPECT_EQ(server_->stats().waiting, 0u);
  EXPECT_EQ(server_->stats().waits_disconnected, 1u);
}

TEST_F(KvServerLimitsTest, AJobsEndFailsItsWaitsAndClosesItsConnections) {
  Start();
  std::unique_ptr<Store> s;
  ASSERT_TRUE(OpenStore(url_, &s).ok());
  Status waited;
  std::thread waiter([&] { waited = s->Wait({"job/j1/attempt/0/never"}, milliseconds(60000)); });
  ASSERT_TRUE(Eventually([&] { return store_->stats().pending_waits == 1; }));
  auto other = Authed("j2");  // another job's wait goes on
  ASSERT_TRUE(other->Send(kv::EncodeRequest(Wait("job/j2/x", 60000))).ok());
  ASSERT_TRUE(Eventually([&] { return store_->stats().pending_waits == 2; }));

  const auto ended = Clock::now();
  jobs_.End("j1");  // what JobManager does when a job finishes: the secret, then the keys
  store_->EraseScope("job/j1/");
  waiter.join();
  EXPECT_LT(Clock::now() - ended, milliseconds(1000));
  EXPECT_EQ(waited.code(), StatusCode::kAborted) << waited.ToString();
  EXPECT_TRUE(Contains(waited, "job j1 ended") && Contains(waited, "WAIT")) << waited.message();
  // The connection no longer grants anything, and says why.
  Status later = s->Set("job/j1/zombie", "x");
  EXPECT_TRUE(Contains(later, "has ended")) << later.ToString();
  std::string v;
  EXPECT_EQ(store_->Get("job/j1/zombie", &v).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->stats().pending_waits, 1u);  // j2's

  ASSERT_TRUE(store_->Set("job/j2/x", "here").ok());
  kv::Response resp;
  ASSERT_TRUE(other->Read(kv::Op::kWait, &resp).ok());
  EXPECT_TRUE(resp.status.ok()) << resp.status.ToString();
}

TEST_F(KvServerLimitsTest, AnAttemptsEndFailsItsWaitsOnly) {
  KvStore store;
  Status old_attempt, next_attempt;
  std::thread a([&] { old_attempt = store.Wait({"job/7/attempt/0/host/1"}, milliseconds(60000)); });
  std::thread b(
      [&] { next_attempt = store.Wait({"job/7/attempt/1/host/1"}, milliseconds(60000)); });
  ASSERT_TRUE(Eventually([&] { return store.stats().pending_waits == 2; }));
  store.EraseScope("job/7/attempt/0/");
  a.join();
  EXPECT_EQ(old_attempt.code(), StatusCode::kAborted);
  EXPECT_TRUE(Contains(old_attempt, "attempt 0 of job 7 ended")) << old_attempt.message();
  EXPECT_EQ(store.stats().pending_waits, 1u);
  ASSERT_TRUE(store.Set("job/7/attempt/1/host/1", "x").ok());
  b.join();
  EXPECT_TRUE(next_attempt.ok()) << next_attempt.ToString();
}

// 300 peers without a secret and 300 parked waits neither lock a new rank out nor cost threads.
TEST_F(KvServerLimitsTest, HundredsOfIdleAndWaitingConnectionsDoNotLockOutANewRank) {
  Start();
  auto threads = [] {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
    }
    return 0;
  };
  const int threads_before = threads();
  std::vector<std::unique_ptr<RawConn>> idle, waiting;
  for (int i = 0; i < 300; ++i) idle.push_back(std::make_unique<RawConn>(server_->address()));
  for (int i = 0; i < 300; ++i) {
    waiting.push_back(Authed());
    ASSERT_TRUE(
        waiting.back()->Send(kv::EncodeRequest(Wait("job/j1/w" + std::to_string(i), 60000))).ok());
  }
  ASSERT_TRUE(Eventually([&] { return store_->stats().pending_waits == 300; }));
  EXPECT_LE(threads(), threads_before + 1);  // no thread per connection
  const KvServerStats st = server_->stats();
  EXPECT_LE(st.unauthenticated, KvServerOptions().max_unauthenticated);
  EXPECT_GE(st.evicted, 300 - KvServerOptions().max_unauthenticated);
  EXPECT_EQ(st.waiting, 300u);

  const auto t0 = Clock::now();
  std::unique_ptr<Store> rank;
  Status s = OpenStore(url_, &rank);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(rank->Set("job/j1/w7", "go").ok());
  EXPECT_LT(Clock::now() - t0, milliseconds(2000));
  kv::Response resp;
  ASSERT_TRUE(waiting[7]->Read(kv::Op::kWait, &resp).ok());
  EXPECT_TRUE(resp.status.ok()) << resp.status.ToString();
}

TEST_F(KvServerLimitsTest, TheConnectionCapRefusesWithAReasonAndLogsIt) {
  KvServerOptions o;
  o.max_connections = 8;
  Start(o);
  std::vector<std::unique_ptr<RawConn>> held;
  for (int i = 0; i < 8; ++i) held.push_back(Authed());
  setenv("HVD_RENDEZVOUS_TIMEOUT_SECONDS", "0.5", 1);
  ::testing::internal::CaptureStderr();
  std::unique_ptr<Store> s;
  Status st = OpenStore(url_, &s);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_TRUE(Contains(st, "8 connections open, its limit")) << st.message();
  EXPECT_NE(log.find("refused a connection from 127.0.0.1:"), std::string::npos) << log;
  // Rate limited: several refused retries, one line.
  EXPECT_GE(server_->stats().refused, 2u);
  EXPECT_EQ(log.find("refused a connection", log.find("refused a connection") + 1),
            std::string::npos)
      << log;
  held.pop_back();  // room again
  ASSERT_TRUE(Eventually([&] { return server_->stats().connections < 8; }));
  setenv("HVD_RENDEZVOUS_TIMEOUT_SECONDS", "5", 1);
  EXPECT_TRUE(OpenStore(url_, &s).ok());
}

TEST_F(KvServerLimitsTest, SilentConnectionsTimeOutAndTheClientReconnectsAfterIdle) {
  KvServerOptions o;
  o.hello_timeout = milliseconds(200);
  o.idle_timeout = milliseconds(300);
  Start(o);
  RawConn mute(server_->address());
  EXPECT_TRUE(mute.Closed());  // no HELLO: closed within the 5 s Closed() allows

  auto raw = Authed();
  std::string payload, notice;
  ASSERT_TRUE(raw->ReadPayload(&payload).ok());  // the idle notice, then EOF
  EXPECT_TRUE(kv::DecodeNotice(payload, &notice));
  EXPECT_TRUE(Contains(Status(StatusCode::kUnavailable, notice), "idle for 300 ms")) << notice;
  EXPECT_TRUE(raw->Closed());

  // The runtime's client answers the notice by reconnecting, transparently.
  std::unique_ptr<Store> s;
  ASSERT_TRUE(OpenStore(url_, &s).ok());
  ASSERT_TRUE(s->Add("job/j1/n", 1, nullptr).ok());
  ASSERT_TRUE(Eventually([&] { return server_->stats().connections == 0; }));
  int64_t n = 0;
  Status st = s->Add("job/j1/n", 1, &n);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(n, 2);  // sent once
  EXPECT_GE(server_->stats().closed_idle, 3u);
}

}  // namespace
}  // namespace hvd::launcherd
