// The fixture of agent_inbox_test.cc: the real AgentGateway, AgentRegistry and JobManager behind
// a gRPC server on 127.0.0.1, test agents on the wire (launcher_test_util.h) with heartbeats,
// the launcher's lease sweeper in two threads, and JobManager's lock held from outside through
// ListPage (whose callback runs under it).
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "launcherd/agent_gateway_service.h"
#include "launcherd/kv_store.h"
#include "tests/launcherd/launcher_test_util.h"

namespace hvd::launcherd {

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
        gateway_->TouchParked();  // as the launcher's sweeper does
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
      jobs_->ListPage(
          "", 0,
          [&](const JobStatus&) {
            held->store(true);
            std::this_thread::sleep_for(d);
            return false;
          },
          &more);
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

}  // namespace hvd::launcherd
