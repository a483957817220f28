// A job's life through the real launcher, with the test acting as the agent over the real
// AgentGateway protocol and as hvdrun over the Launcher service.
#include <thread>

#include "hvd/v1/rendezvous.grpc.pb.h"
#include "launcher_test_util.h"

namespace hvd::launcherd::testing {
namespace {

class AgentStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    launcher_ = StartLauncher();
    ASSERT_TRUE(launcher_);
    stub_ = v1::Launcher::NewStub(control::NewChannel(launcher_->grpc_address()));
    agent_ = std::make_unique<StreamAgent>(launcher_->grpc_address(), "host-a", 2);
    v1::LauncherMessage m;
    ASSERT_TRUE(agent_->Next(&m));
    ASSERT_TRUE(m.has_ack()) << "the first message must be RegisterAck: " << m.ShortDebugString();
    agent_id_ = m.ack().agent_id();
    EXPECT_FALSE(agent_id_.empty());
    EXPECT_EQ(m.ack().heartbeat_interval_ms(), 1000);
    EXPECT_EQ(m.ack().lease_ms(), 5000);
  }
  void TearDown() override {
    agent_.reset();
    if (launcher_) launcher_->Stop();
  }

  std::string Submit(int np) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->add_argv("./train");
    req.mutable_spec()->add_argv("--epochs=1");
    req.mutable_spec()->set_np(np);
    (*req.mutable_spec()->mutable_env())["MY_VAR"] = "42";
    v1::SubmitJobResponse resp;
    grpc::Status s = stub_->SubmitJob(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job_id();
  }

  // Reads `n` StartRank commands, in rank order.
  std::vector<v1::StartRank> Starts(int n) {
    std::vector<v1::StartRank> starts;
    for (int i = 0; i < n; ++i) {
      v1::LauncherMessage m;
      if (!agent_->Next(&m) || !m.has_start()) {
        ADD_FAILURE() << "expected StartRank " << i << ", got " << m.ShortDebugString();
        break;
      }
      starts.push_back(m.start());
    }
    return starts;
  }

  std::unique_ptr<Launcher> launcher_;
  std::unique_ptr<v1::Launcher::Stub> stub_;
  std::unique_ptr<StreamAgent> agent_;
  std::string agent_id_;
};

// Collects a WatchJob stream in the background until the launcher ends it.
class Watcher {
 public:
  Watcher(v1::Launcher::Stub& stub, const std::string& id) : ctx_(Ctx()) {
    v1::WatchJobRequest req;
    req.set_job_id(id);
    req.set_follow(true);
    reader_ = stub.WatchJob(ctx_.get(), req);
    thread_ = std::thread([this] {
      v1::JobEvent e;
      while (reader_->Read(&e)) events_.push_back(e);
      status_ = reader_->Finish();
    });
  }
  // Joins; the stream must end by itself once the job finished.
  std::vector<v1::JobEvent> Events() {
    thread_.join();
    EXPECT_TRUE(status_.ok()) << status_.error_message();
    return events_;
  }

 private:
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader_;
  std::thread thread_;
  std::vector<v1::JobEvent> events_;
  grpc::Status status_;
};

TEST_F(AgentStreamTest, JobSucceedsWhenEveryRankExitsZero) {
  const std::string id = Submit(2);
  Watcher watcher(*stub_, id);
  std::vector<v1::StartRank> starts = Starts(2);
  ASSERT_EQ(starts.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const v1::StartRank& s = starts[r];
    EXPECT_EQ(s.job_id(), id);
    EXPECT_EQ(s.placement().rank(), r);
    EXPECT_EQ(s.placement().local_rank(), r);
    EXPECT_EQ(s.placement().local_size(), 2);
    EXPECT_EQ(s.placement().cross_size(), 1);
    EXPECT_EQ(s.placement().agent_id(), agent_id_);
    EXPECT_EQ(s.placement().host(), "host-a");
    EXPECT_EQ(s.argv(0), "./train");
    const auto& env = s.env();
    EXPECT_EQ(env.at("HVD_RANK"), std::to_string(r));
    EXPECT_EQ(env.at("HOROVOD_SIZE"), "2");
    EXPECT_EQ(env.at("HVD_RENDEZVOUS"), "hvd://" + launcher_->rendezvous_address());
    EXPECT_EQ(env.at("HVD_HOSTNAME"), "host-a");
    EXPECT_EQ(env.at("HVD_ADVERTISE_ADDR"), "127.0.0.1");
    EXPECT_EQ(env.at("MY_VAR"), "42");
  }
  const std::string secret = starts[0].env().at("HVD_JOB_SECRET");

  // The job's secret opens its own rendezvous keys (over gRPC here; ranks use the TCP endpoint).
  auto rdv = v1::Rendezvous::NewStub(control::NewChannel(launcher_->grpc_address()));
  v1::SetRequest set;
  set.set_scope("job/" + id + "/attempt/0");
  set.set_key("host/0");
  set.set_value("2\nhost-a");
  v1::SetResponse set_resp;
  grpc::Status s = rdv->Set(Ctx(secret).get(), set, &set_resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  // ... and no other job's: refused, and the refusal logged with the caller's address.
  v1::SetRequest other = set;
  other.set_scope("job/not-" + id + "/attempt/0");
  ::testing::internal::CaptureStderr();
  grpc::Status refused = rdv->Set(Ctx(secret).get(), other, &set_resp);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED) << refused.error_message();
  EXPECT_NE(log.find("refused a call from ipv4:127.0.0.1"), std::string::npos) << log;
  EXPECT_NE(log.find("outside that job's keys"), std::string::npos) << log;

  agent_->Event(id, 0, v1::RANK_RUNNING);
  agent_->Event(id, 1, v1::RANK_RUNNING);
  agent_->Output(id, 0, "epoch 1 loss 0.5");
  WaitJob(*stub_, id, [](const v1::JobStatus& st) { return st.state() == v1::RUNNING; });
  agent_->Event(id, 0, v1::RANK_EXITED, 0);
  agent_->Event(id, 1, v1::RANK_EXITED, 0);
  v1::JobStatus st =
      WaitJob(*stub_, id, [](const v1::JobStatus& j) { return j.state() == v1::SUCCEEDED; });
  EXPECT_EQ(st.exit_code(), 0);
  EXPECT_EQ(st.ranks(1).pid(), 5001);
  EXPECT_EQ(st.ranks(1).state(), v1::RANK_EXITED);

  std::vector<v1::JobEvent> events = watcher.Events();
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(events.front().has_status());
  ASSERT_TRUE(events.back().has_status());
  EXPECT_EQ(events.back().status().state(), v1::SUCCEEDED);
  bool saw_output = false, saw_ranks_started = false, saw_agents_ready = false;
  for (const v1::JobEvent& e : events) {
    saw_output |=
        e.has_output() && e.output().text() == "epoch 1 loss 0.5" && e.output().seq() == 0;
    saw_ranks_started |= e.progress() == "ranks started 2/2";
    saw_agents_ready |= e.progress() == "agents ready 1/1";
  }
  EXPECT_TRUE(saw_output);
  EXPECT_TRUE(saw_ranks_started);
  EXPECT_TRUE(saw_agents_ready);

  // Once the job is over its secret opens nothing.
  s = rdv->Set(Ctx(secret).get(), set, &set_resp);
  EXPECT_FALSE(s.ok());
}

TEST_F(AgentStreamTest, NonZeroExitFailsTheJobAndStopsIt) {
  const std::string id = Submit(2);
  Watcher watcher(*stub_, id);
  ASSERT_EQ(Starts(2).size(), 2u);
  agent_->Event(id, 0, v1::RANK_RUNNING);
  agent_->Event(id, 1, v1::RANK_RUNNING);
  agent_->Event(id, 1, v1::RANK_EXITED, 3, "Traceback (most recent call last):\nValueError: bad\n");
  v1::LauncherMessage m;
  ASSERT_TRUE(agent_->Next(&m));
  ASSERT_TRUE(m.has_stop()) << m.ShortDebugString();
  EXPECT_EQ(m.stop().job_id(), id);
  EXPECT_EQ(m.stop().grace_ms(), 1500);
  EXPECT_EQ(m.stop().reason(), "rank 1 on host-a exited with code 3");

  v1::JobStatus st =
      WaitJob(*stub_, id, [](const v1::JobStatus& j) { return j.state() == v1::FAILED; });
  EXPECT_EQ(st.exit_code(), 3);
  EXPECT_EQ(st.failure().rank(), 1);
  EXPECT_EQ(st.failure().host(), "host-a");
  EXPECT_EQ(st.failure().exit_code(), 3);
  EXPECT_EQ(st.failure().message(), "rank 1 on host-a exited with code 3");
  EXPECT_NE(st.failure().stderr_tail().find("ValueError: bad"), std::string::npos);

  // The watch ends only once the stopped rank is reported gone, with the final status last.
  agent_->Event(id, 0, v1::RANK_KILLED);
  std::vector<v1::JobEvent> events = watcher.Events();
  ASSERT_TRUE(events.back().has_status());
  EXPECT_EQ(events.back().status().state(), v1::FAILED);
  EXPECT_EQ(events.back().status().ranks(0).state(), v1::RANK_KILLED);

  // The slots are free again: the next job is placed at once.
  const std::string next = Submit(2);
  EXPECT_EQ(Starts(2).size(), 2u);
  WaitJob(*stub_, next, [](const v1::JobStatus& j) { return j.state() == v1::STARTING; });
}

TEST_F(AgentStreamTest, JobsQueueForSlotsAndCancelStopsThem) {
  const std::string first = Submit(2);
  ASSERT_EQ(Starts(2).size(), 2u);
  const std::string second = Submit(1);
  v1::JobStatus st = WaitJob(*stub_, second, [](const v1::JobStatus&) { return true; });
  EXPECT_EQ(st.state(), v1::PENDING);
  EXPECT_EQ(st.reason(), "needs 1 slot; 0 free on 1 agent (2 in total)");

  v1::CancelJobRequest cancel;
  cancel.set_job_id(first);
  cancel.set_reason("test says so");
  v1::CancelJobResponse resp;
  ASSERT_TRUE(stub_->CancelJob(Ctx().get(), cancel, &resp).ok());
  EXPECT_EQ(resp.state(), v1::CANCELLED);
  v1::LauncherMessage m;
  ASSERT_TRUE(agent_->Next(&m));
  ASSERT_TRUE(m.has_stop());
  EXPECT_EQ(m.stop().reason(), "cancelled: test says so");
  // Slots free only when the agent reports the ranks gone.
  agent_->Event(first, 0, v1::RANK_KILLED);
  agent_->Event(first, 1, v1::RANK_KILLED);
  ASSERT_TRUE(agent_->Next(&m));
  ASSERT_TRUE(m.has_start());
  EXPECT_EQ(m.start().job_id(), second);
}

TEST_F(AgentStreamTest, HeartbeatListingAnUnknownJobEarnsAStop) {
  v1::AgentMessage hb;
  hb.mutable_heartbeat()->set_time_ms(1);
  hb.mutable_heartbeat()->add_running_jobs("left-over-job");
  agent_->Send(hb);
  v1::LauncherMessage m;
  ASSERT_TRUE(agent_->Next(&m));
  ASSERT_TRUE(m.has_stop());
  EXPECT_EQ(m.stop().job_id(), "left-over-job");
}

TEST_F(AgentStreamTest, FirstMessageMustBeAgentInfo) {
  auto stub = v1::AgentGateway::NewStub(control::NewChannel(launcher_->grpc_address()));
  auto ctx = Ctx();
  auto stream = stub->Connect(ctx.get());
  v1::AgentMessage hb;
  hb.mutable_heartbeat()->set_time_ms(1);
  stream->Write(hb);
  v1::LauncherMessage m;
  EXPECT_FALSE(stream->Read(&m));
  grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("AgentInfo"), std::string::npos) << s.error_message();
}

}  // namespace
}  // namespace hvd::launcherd::testing
