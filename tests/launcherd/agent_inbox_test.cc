// A busy JobManager delays what agents said, never their liveness (launcherd/agent_inbox.h): the
// real AgentGateway, AgentRegistry and JobManager behind a gRPC server on 127.0.0.1, test agents
// on the wire (launcher_test_util.h), and JobManager's lock held from outside through ListPage
// (whose callback runs under it) for longer than the lease.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include "launcherd/agent_gateway_service.h"
#include "launcherd/kv_store.h"
#include "tests/launcherd/launcher_test_util.h"

namespace hvd::launcherd {
namespace {

using namespace std::chrono_literals;
using testing::StreamAgent;

constexpr auto kLease = 800ms;

// Heartbeats every 100 ms through `send`, as hvd-agent sends them, listing `job` once set.
class Beater {
 public:
  explicit Beater(std::function<bool(const v1::AgentMessage&)> send)
      : send_(std::move(send)), thread_([this] {
          std::unique_lock<std::mutex> lock(mu_);
          while (!cv_.wait_for(lock, 100ms, [&] { return stop_; })) {
            v1::AgentMessage m;
            if (!job_.empty()) m.mutable_heartbeat()->add_running_jobs(job_);
            m.mutable_heartbeat();
            lock.unlock();
            const bool ok = send_(m);
            lock.lock();
            if (!ok) return;
          }
        }) {}
  ~Beater() { Stop(); }
  void SetJob(const std::string& job) {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = job;
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::function<bool(const v1::AgentMessage&)> send_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string job_;
  bool stop_ = false;
  std::thread thread_;
};

// A StreamAgent with its heartbeats; the RegisterAck taken.
struct BeatingAgent {
  BeatingAgent(const std::string& address, const std::string& host, int slots,
               const std::string& id = "", uint64_t incarnation = 0)
      : agent(address, host, slots, testing::kToken, id, incarnation),
        beater([this](const v1::AgentMessage& m) {
          agent.Send(m);
          return true;
        }) {
    v1::LauncherMessage ack;
    EXPECT_TRUE(agent.Next(&ack, 5s));
    EXPECT_TRUE(ack.has_ack()) << ack.ShortDebugString();
    EXPECT_TRUE(ack.ack().acks_rank_events());
  }
  StreamAgent agent;
  Beater beater;
};

class AgentInboxTest : public ::testing::Test {
 protected:
  // A job of `np` ranks ("./train").
  Status SubmitJob(std::string* job, int np = 1) {
    JobSpec spec;
    spec.argv = {"./train"};
    spec.np = np;
    return jobs_->Submit(spec, job);
  }

  AgentInboxTest() : registry_(kLease) {
    JobManagerOptions o;
    o.rendezvous_address = "127.0.0.1:1";
    o.kill_grace = 1000ms;
    jobs_ = std::make_unique<JobManager>(o, &registry_, &store_);
    gateway_ = std::make_unique<AgentGatewayService>(&registry_, jobs_.get(), 100ms, kLease);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(gateway_.get());
    server_ = builder.BuildAndStart();
    address_ = "127.0.0.1:" + std::to_string(port);
    // The launcher's sweeper (launcher.cc), in two threads: under real load the lease check gets
    // its turn between the lock's holders, while this test's one long hold would otherwise stop
    // it too and hide what the hold did to the leases.
    leases_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, 20ms, [&] { return stop_; })) {
        for (AgentInfo& a : registry_.ExpireLeases(std::chrono::steady_clock::now())) {
          lost_.push_back(std::move(a));
          cv_.notify_all();
        }
      }
    });
    timers_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      size_t told = 0;
      while (!cv_.wait_for(lock, 20ms, [&] { return stop_; })) {
        std::vector<AgentInfo> lost(lost_.begin() + told, lost_.end());
        told = lost_.size();
        lock.unlock();
        for (const AgentInfo& a : lost) jobs_->OnAgentLost(a);
        jobs_->Tick();
        lock.lock();
      }
    });
  }
  ~AgentInboxTest() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    leases_.join();
    timers_.join();
    jobs_->Shutdown("test over");
    registry_.CloseAll();
    server_->Shutdown(std::chrono::system_clock::now() + 2s);
    gateway_.reset();  // applies what is still queued, while jobs_ is alive
  }

  // Holds JobManager's lock on another thread for `d` (ListPage calls its callback under it);
  // returns once it is held.
  std::thread HoldLock(std::chrono::milliseconds d) {
    auto held = std::make_shared<std::atomic<bool>>(false);
    std::thread t([this, d, held] {
      bool more = false;
      jobs_->ListPage("", 0, [&](const JobStatus&) {
        held->store(true);
        std::this_thread::sleep_for(d);
        return false;
      }, &more);
    });
    for (int i = 0; i < 500 && !held->load(); ++i) std::this_thread::sleep_for(2ms);
    EXPECT_TRUE(held->load()) << "ListPage never called back (no job in the table?)";
    return t;
  }

  AgentInfo Agent(const std::string& host) {
    for (const AgentInfo& a : registry_.List()) {
      if (a.host == host) return a;
    }
    return {};
  }
  // Waits for `host` to be registered; its id.
  std::string WaitAgent(const std::string& host) {
    for (int i = 0; i < 500 && Agent(host).state != "READY"; ++i) std::this_thread::sleep_for(5ms);
    EXPECT_EQ(Agent(host).state, "READY");
    return Agent(host).id;
  }
  JobStatus Job(const std::string& id) {
    JobStatus st;
    EXPECT_TRUE(jobs_->Get(id, &st).ok());
    return st;
  }
  template <typename Pred>
  JobStatus WaitJob(const std::string& id, Pred pred) {
    JobStatus st = Job(id);
    for (int i = 0; i < 500 && !pred(st); ++i) {
      std::this_thread::sleep_for(10ms);
      st = Job(id);
    }
    EXPECT_TRUE(pred(st)) << "job " << id << " is " << control::JobStateName(st.state) << ": "
                          << st.reason;
    return st;
  }
  // A job of `np` ranks on `agent`, its ranks reported RUNNING; its id.
  std::string RunningJob(BeatingAgent& a, int np) {
    StreamAgent& agent = a.agent;
    std::string id;
    EXPECT_TRUE(SubmitJob(&id, np).ok());
    for (int i = 0; i < np; ++i) {
      v1::LauncherMessage m;
      EXPECT_TRUE(agent.Next(&m, 5s));
      EXPECT_TRUE(m.has_start()) << m.ShortDebugString();
      agent.Event(id, m.start().placement().rank(), v1::RANK_RUNNING);
    }
    a.beater.SetJob(id);
    WaitJob(id, [](const JobStatus& s) { return s.state == JobState::kRunning; });
    return id;
  }
  KvStore store_;
  AgentRegistry registry_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<AgentGatewayService> gateway_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<AgentInfo> lost_;
  bool stop_ = false;
  std::thread leases_, timers_;
};

// The failure: a launcher busy for longer than the lease declared healthy agents LOST,
// because their streams' readers waited for JobManager's lock before reading the next heartbeat.
TEST_F(AgentInboxTest, BusyManagerLosesNoAgentAndFailsNoJob) {
  BeatingAgent a(address_, "busy-1", 2);
  WaitAgent("busy-1");
  const std::string job = RunningJob(a, 2);

  // Heartbeats go on, and the ranks exit, all while the lock is held for three leases.
  std::thread hold = HoldLock(3 * kLease);
  std::this_thread::sleep_for(2 * kLease);
  a.agent.Event(job, 0, v1::RANK_EXITED, 0);
  a.agent.Event(job, 1, v1::RANK_EXITED, 0);
  std::this_thread::sleep_for(kLease / 2);
  EXPECT_EQ(Agent("busy-1").state, "READY") << "lost while the launcher was busy";
  hold.join();

  ASSERT_TRUE(gateway_->WaitApplied(5s));
  JobStatus st = WaitJob(job, [](const JobStatus& s) { return s.state != JobState::kRunning; });
  EXPECT_EQ(st.state, JobState::kSucceeded) << st.reason;
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_TRUE(lost_.empty()) << lost_.front().id << " declared LOST";
}

// A stream's reports still queued when its agent re-registered on a new stream are not applied:
// the new stream's first heartbeat says what runs.
TEST_F(AgentInboxTest, SupersededStreamsReportsAreDropped) {
  BeatingAgent a(address_, "re-1", 1);
  StreamAgent& old_stream = a.agent;
  const std::string id = WaitAgent("re-1");
  const std::string job = RunningJob(a, 1);

  std::thread hold = HoldLock(3 * kLease / 2);
  old_stream.Event(job, 0, v1::RANK_EXITED, 3);  // read and queued, not applied: the lock is held
  std::this_thread::sleep_for(100ms);
  // The agent comes back under its id on a new stream (the old one is closed by the registry).
  auto stub = v1::AgentGateway::NewStub(control::NewChannel(address_));
  auto ctx = testing::Ctx();
  ctx->set_deadline(std::chrono::system_clock::now() + 10s);
  auto fresh = stub->Connect(ctx.get());
  v1::AgentMessage reg;
  reg.mutable_register_()->set_agent_id(id);
  reg.mutable_register_()->set_host("re-1");
  reg.mutable_register_()->set_advertise_addr("127.0.0.1");
  reg.mutable_register_()->set_slots(1);
  ASSERT_TRUE(fresh->Write(reg));
  v1::LauncherMessage ack;
  ASSERT_TRUE(fresh->Read(&ack));
  ASSERT_EQ(ack.ack().agent_id(), id);
  std::mutex fresh_mu;
  Beater fresh_beater([&](const v1::AgentMessage& m) {
    std::lock_guard<std::mutex> lock(fresh_mu);
    return fresh->Write(m);
  });
  fresh_beater.SetJob(job);
  hold.join();
  old_stream.WaitClosed(5s);
  a.beater.Stop();

  ASSERT_TRUE(gateway_->WaitApplied(5s));
  JobStatus st = Job(job);
  EXPECT_EQ(st.state, JobState::kRunning) << st.reason;
  ASSERT_EQ(st.ranks.size(), 1u);
  EXPECT_EQ(st.ranks[0].state, RankState::kRunning) << "the old stream's exit was applied";

  // The new stream's reports are applied.
  v1::AgentMessage exited;
  exited.mutable_rank_event()->set_job_id(job);
  exited.mutable_rank_event()->set_rank(0);
  exited.mutable_rank_event()->set_state(v1::RANK_EXITED);
  {
    std::lock_guard<std::mutex> lock(fresh_mu);
    ASSERT_TRUE(fresh->Write(exited));
  }
  st = WaitJob(job, [](const JobStatus& s) { return s.state != JobState::kRunning; });
  EXPECT_EQ(st.state, JobState::kSucceeded) << st.reason;
  fresh_beater.Stop();
  fresh->WritesDone();
  ctx->TryCancel();
  fresh->Finish();
}

// One stream's reports reach JobManager in the order they were sent, also when they wait in one
// batch: the job's history interleaves output and states as the agent sent them.
TEST_F(AgentInboxTest, ReportsKeepTheirOrder) {
  BeatingAgent a(address_, "order-1", 1);
  StreamAgent& agent = a.agent;
  WaitAgent("order-1");
  std::string job;
  ASSERT_TRUE(SubmitJob(&job).ok());
  v1::LauncherMessage start;
  ASSERT_TRUE(agent.Next(&start, 5s));
  ASSERT_TRUE(start.has_start());

  std::thread hold = HoldLock(kLease);
  agent.Output(job, 0, "before running");
  agent.Event(job, 0, v1::RANK_RUNNING);
  agent.Output(job, 0, "while running");
  agent.Event(job, 0, v1::RANK_EXITED, 0);
  hold.join();
  ASSERT_TRUE(gateway_->WaitApplied(5s));
  WaitJob(job, [](const JobStatus& s) { return s.state == JobState::kSucceeded; });

  WatchCursor cursor;
  std::vector<JobEvent> events;
  bool done = false;
  ASSERT_TRUE(jobs_->NextEvents(job, 0, false, 0ms, &cursor, &events, &done).ok());
  std::vector<std::string> seen;
  for (const JobEvent& e : events) {
    if (e.kind == JobEvent::Kind::kOutput) seen.push_back(e.output.text);
    if (e.kind == JobEvent::Kind::kStatus &&
        (seen.empty() || seen.back() != control::JobStateName(e.status.state))) {
      seen.push_back(control::JobStateName(e.status.state));
    }
  }
  const std::vector<std::string> want = {"STARTING", "before running", "RUNNING",
                                         "while running", "SUCCEEDED"};
  std::vector<std::string> got;
  for (const std::string& s : seen) {
    if (std::find(want.begin(), want.end(), s) != want.end()) got.push_back(s);
  }
  EXPECT_EQ(got, want);
}

// Numbered rank events (issue 22): acked with the highest seq applied, once per batch.
v1::AgentMessage SeqEvent(const std::string& job, v1::RankState state, int code, uint64_t seq) {
  v1::AgentMessage m;
  m.mutable_rank_event()->set_job_id(job);
  m.mutable_rank_event()->set_state(state);
  m.mutable_rank_event()->set_pid(5000);
  m.mutable_rank_event()->set_exit_code(code);
  m.mutable_rank_event()->set_seq(seq);
  return m;
}
// Reads RankEventAcks (skipping other commands) until one covers `seq`; its through_seq, or 0.
uint64_t WaitAck(StreamAgent& agent, uint64_t seq) {
  v1::LauncherMessage m;
  uint64_t last = 0;
  while (agent.Next(&m, 5s)) {
    if (!m.has_event_ack()) continue;
    EXPECT_GE(m.event_ack().through_seq(), last) << "acks never go back";
    last = m.event_ack().through_seq();
    if (last >= seq) return last;
  }
  ADD_FAILURE() << "no RankEventAck through " << seq << " (last " << last << ")";
  return 0;
}

// An event whose seq was applied before is dropped (the agent resends what an ack lost with its
// stream did not cover): here a "resend" of seq 1 that says the rank failed.
TEST_F(AgentInboxTest, RankEventsAreAckedAndAnAppliedSeqIsNotAppliedAgain) {
  BeatingAgent a(address_, "seq-1", 1, "", /*incarnation=*/7);
  WaitAgent("seq-1");
  std::string job;
  ASSERT_TRUE(SubmitJob(&job).ok());
  v1::LauncherMessage start;
  ASSERT_TRUE(a.agent.Next(&start, 5s));
  ASSERT_TRUE(start.has_start()) << start.ShortDebugString();
  a.agent.Send(SeqEvent(job, v1::RANK_RUNNING, 0, 1));
  a.beater.SetJob(job);
  WaitJob(job, [](const JobStatus& s) { return s.state == JobState::kRunning; });
  EXPECT_EQ(WaitAck(a.agent, 1), 1u);

  a.agent.Send(SeqEvent(job, v1::RANK_EXITED, 1, 1));  // seq 1 again: ignored, acked again
  EXPECT_EQ(WaitAck(a.agent, 1), 1u);
  ASSERT_TRUE(gateway_->WaitApplied(5s));
  EXPECT_EQ(Job(job).state, JobState::kRunning) << "a duplicate seq was applied";
  a.agent.Send(SeqEvent(job, v1::RANK_EXITED, 0, 2));
  a.beater.SetJob("");
  EXPECT_EQ(WaitAck(a.agent, 2), 2u);
  JobStatus st = WaitJob(job, [](const JobStatus& s) { return s.state != JobState::kRunning; });
  EXPECT_EQ(st.state, JobState::kSucceeded) << st.reason;
}

// The failure: a rank's exit written to a stream that broke before the launcher applied
// it. The agent re-registers within its lease and sends its unacknowledged events first; the old
// stream's copy is dropped (superseded), the resend applied once, and the job succeeds.
TEST_F(AgentInboxTest, AnExitLostWithABrokenStreamIsResentAndTheJobSucceeds) {
  auto a = std::make_unique<BeatingAgent>(address_, "seq-2", 1, "", /*incarnation=*/9);
  const std::string id = WaitAgent("seq-2");
  std::string job;
  ASSERT_TRUE(SubmitJob(&job).ok());
  v1::LauncherMessage start;
  ASSERT_TRUE(a->agent.Next(&start, 5s));
  a->agent.Send(SeqEvent(job, v1::RANK_RUNNING, 0, 1));
  a->beater.SetJob(job);
  WaitJob(job, [](const JobStatus& s) { return s.state == JobState::kRunning; });
  WaitAck(a->agent, 1);

  std::thread hold = HoldLock(3 * kLease / 2);
  a->agent.Send(SeqEvent(job, v1::RANK_EXITED, 0, 2));  // read and queued, not applied
  std::this_thread::sleep_for(100ms);
  a.reset();  // the stream breaks
  for (int i = 0; i < 200 && Agent("seq-2").state == "READY"; ++i) std::this_thread::sleep_for(5ms);
  StreamAgent fresh(address_, "seq-2", 1, testing::kToken, id, /*incarnation=*/9);
  v1::LauncherMessage ack;
  ASSERT_TRUE(fresh.Next(&ack, 5s));
  ASSERT_EQ(ack.ack().agent_id(), id) << ack.ShortDebugString();
  fresh.Send(SeqEvent(job, v1::RANK_EXITED, 0, 2));  // unacked: resent first
  Beater beater([&](const v1::AgentMessage& m) {    // the rank is gone: no job listed
    fresh.Send(m);
    return true;
  });
  hold.join();
  JobStatus st = WaitJob(job, [](const JobStatus& s) { return s.state != JobState::kRunning; });
  EXPECT_EQ(st.state, JobState::kSucceeded) << st.reason;
  ASSERT_EQ(st.ranks.size(), 1u);
  EXPECT_EQ(st.ranks[0].state, RankState::kExited);
  EXPECT_EQ(WaitAck(fresh, 2), 2u);
  beater.Stop();
}

// An agent restarted with its --state-dir comes back under its id as another process
// (AgentInfo.incarnation) and numbers its events from 1 again: they are applied, not taken for
// the old process's.
TEST_F(AgentInboxTest, ARestartedAgentProcessNumbersItsEventsFromOneAgain) {
  auto a = std::make_unique<BeatingAgent>(address_, "seq-3", 1, "", /*incarnation=*/11);
  const std::string id = WaitAgent("seq-3");
  std::string job;
  ASSERT_TRUE(SubmitJob(&job).ok());
  v1::LauncherMessage start;
  ASSERT_TRUE(a->agent.Next(&start, 5s));
  a->agent.Send(SeqEvent(job, v1::RANK_RUNNING, 0, 1));
  a->agent.Send(SeqEvent(job, v1::RANK_EXITED, 0, 2));
  EXPECT_EQ(WaitAck(a->agent, 2), 2u);
  WaitJob(job, [](const JobStatus& s) { return s.state == JobState::kSucceeded; });
  a.reset();
  for (int i = 0; i < 200 && Agent("seq-3").state == "READY"; ++i) std::this_thread::sleep_for(5ms);

  BeatingAgent b(address_, "seq-3", 1, id, /*incarnation=*/12);
  std::string job2;
  ASSERT_TRUE(SubmitJob(&job2).ok());
  ASSERT_TRUE(b.agent.Next(&start, 5s));
  ASSERT_TRUE(start.has_start()) << start.ShortDebugString();
  b.agent.Send(SeqEvent(job2, v1::RANK_RUNNING, 0, 1));
  b.beater.SetJob(job2);
  EXPECT_EQ(WaitAck(b.agent, 1), 1u);
  WaitJob(job2, [](const JobStatus& s) { return s.state == JobState::kRunning; });
}

}  // namespace
}  // namespace hvd::launcherd
