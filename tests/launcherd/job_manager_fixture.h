// JobManager's rules without gRPC: agents are fake links that record the commands sent to them.
// Shared by the JobManager suites.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "launcherd/job_manager.h"

namespace hvd::launcherd {

using namespace std::chrono_literals;

class FakeLink : public AgentLink {
 public:
  bool SendStartRank(const StartRankCommand& c) override {
    std::lock_guard<std::mutex> lock(mu);
    starts.push_back(c);
    return true;
  }
  bool SendStopJob(const StopJobCommand& c) override {
    std::lock_guard<std::mutex> lock(mu);
    stops.push_back(c);
    return true;
  }
  bool SendStackDump(const StackDumpCommand& c) override {
    std::lock_guard<std::mutex> lock(mu);
    dumps.push_back(c);
    return true;
  }
  void Close() override {}
  std::mutex mu;
  std::vector<StartRankCommand> starts;
  std::vector<StopJobCommand> stops;
  std::vector<StackDumpCommand> dumps;
};

class JobManagerFixture : public ::testing::Test {
 protected:
  JobManagerFixture() : registry_(60s) {
    jobs_ = std::make_unique<JobManager>(Options(), &registry_, &store_);
  }

  static JobManagerOptions Options() {
    JobManagerOptions o;
    o.rendezvous_address = "10.0.0.1:7071";
    o.kill_grace = 1234ms;
    o.reconcile_after = 0ms;
    o.max_output_lines = 50;
    return o;
  }

  // An agent on `host` registered through a link of type L (FakeLink or one derived from it).
  template <typename L = FakeLink>
  std::shared_ptr<L> AddAgent(const std::string& host, int slots) {
    auto link = std::make_shared<L>();
    AgentInfo info;
    info.host = host;
    info.advertise_addr = "addr-" + host;
    info.slots = slots;
    ids_[link.get()] = registry_.Register(info, link);
    jobs_->Schedule();
    return link;
  }
  std::string Id(const std::shared_ptr<FakeLink>& link) { return ids_[link.get()]; }

  static JobSpec Spec(int np, std::vector<control::HostRequest> hosts = {}) {
    JobSpec spec;
    spec.argv = {"./train", "--lr", "0.1"};
    spec.np = np;
    spec.hosts = std::move(hosts);
    spec.env = {{"NCCL_DEBUG", "INFO"}};
    return spec;
  }
  std::string Submit(int np, std::vector<control::HostRequest> hosts = {}) {
    return Submit(Spec(np, std::move(hosts)));
  }
  std::string Submit(const JobSpec& spec) {
    std::string id;
    Status s = jobs_->Submit(spec, &id);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return id;
  }
  JobStatus Get(const std::string& id) {
    JobStatus st;
    EXPECT_TRUE(jobs_->Get(id, &st).ok());
    return st;
  }
  void Event(const std::shared_ptr<FakeLink>& link, const std::string& job, int rank,
             RankState state, int code = 0, int sig = 0, std::string tail = "",
             std::string error = "") {
    RankEventReport e;
    e.job_id = job;
    e.rank = rank;
    e.state = state;
    e.pid = 1000 + rank;
    e.exit_code = code;
    e.signal = sig;
    e.stderr_tail = std::move(tail);
    e.error = std::move(error);
    jobs_->OnRankEvent(Id(link), e);
  }

  // A new JobManager with these options (the table starts empty, or is restored).
  void Reset(const JobManagerOptions& o) {
    jobs_.reset();
    jobs_ = std::make_unique<JobManager>(o, &registry_, &store_);
  }

  KvStore store_;
  AgentRegistry registry_;
  std::unique_ptr<JobManager> jobs_;
  std::map<const AgentLink*, std::string> ids_;
};

}  // namespace hvd::launcherd
