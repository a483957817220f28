// The launcher checks the cluster token once, in the gRPC server's token gate
// (control/token_gate.h), not in each handler. Every method of every service is called here
// without a token, with a wrong one, and (for the Launcher and AgentGateway services) with a live
// job's secret, which opens the Rendezvous service only: each call must be refused with the codes
// and messages hvdrun and hvd-agent show, and nothing may have happened.
#include <google/protobuf/descriptor.h>

#include <functional>
#include <map>

#include "control/token.h"
#include "control/token_gate.h"
#include "hvd/v1/rendezvous.grpc.pb.h"
#include "launcher_test_util.h"

namespace hvd::launcherd::testing {
namespace {

// A call of one method with the given context; its final status.
using Call = std::function<grpc::Status(grpc::ClientContext*)>;

// The "hvd-token" a call carries; `absent`: none at all.
struct Credential {
  std::string name;
  bool absent = false;
  std::string token;
};

std::unique_ptr<grpc::ClientContext> ContextWith(const Credential& c) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!c.absent) ctx->AddMetadata(control::kTokenMetadataKey, c.token);
  ctx->set_deadline(std::chrono::system_clock::now() + 10s);
  return ctx;
}

// How many methods a service declares, from its descriptor: a method added later without a line
// here fails the test instead of going untested.
int MethodCount(const std::string& service) {
  const google::protobuf::ServiceDescriptor* d =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
  return d == nullptr ? -1 : d->method_count();
}

class TokenGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    launcher_ = StartLauncher();
    ASSERT_TRUE(launcher_);
    auto channel = control::NewChannel(launcher_->grpc_address());
    launcher_stub_ = v1::Launcher::NewStub(channel);
    gateway_stub_ = v1::AgentGateway::NewStub(channel);
    rendezvous_stub_ = v1::Rendezvous::NewStub(channel);
    agent_ = std::make_unique<StreamAgent>(launcher_->grpc_address(), "host-a", 1);
    v1::LauncherMessage m;
    ASSERT_TRUE(agent_->Next(&m) && m.has_ack()) << m.ShortDebugString();

    // A job placed on the agent: its StartRank carries the job's secret, live while it runs.
    v1::SubmitJobRequest req;
    req.mutable_spec()->add_argv("./train");
    req.mutable_spec()->set_np(1);
    v1::SubmitJobResponse resp;
    grpc::Status s = launcher_stub_->SubmitJob(Ctx().get(), req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    job_id_ = resp.job_id();
    ASSERT_TRUE(agent_->Next(&m) && m.has_start()) << m.ShortDebugString();
    secret_ = m.start().env().at("HVD_JOB_SECRET");
    ASSERT_FALSE(secret_.empty());
  }
  void TearDown() override {
    agent_.reset();
    if (launcher_) launcher_->Stop();
  }

  // Every Launcher and AgentGateway method, by name, each with a request that would change
  // something (or open a stream) if it got past the gate.
  std::map<std::string, Call> ClusterTokenMethods() {
    std::map<std::string, Call> calls;
    calls["Launcher.SubmitJob"] = [this](grpc::ClientContext* ctx) {
      v1::SubmitJobRequest req;
      req.mutable_spec()->add_argv("./intruder");
      req.mutable_spec()->set_np(1);
      v1::SubmitJobResponse resp;
      return launcher_stub_->SubmitJob(ctx, req, &resp);
    };
    calls["Launcher.GetJob"] = [this](grpc::ClientContext* ctx) {
      v1::GetJobRequest req;
      req.set_job_id(job_id_);
      v1::JobStatus resp;
      return launcher_stub_->GetJob(ctx, req, &resp);
    };
    calls["Launcher.ListJobs"] = [this](grpc::ClientContext* ctx) {
      v1::ListJobsResponse resp;
      return launcher_stub_->ListJobs(ctx, {}, &resp);
    };
    calls["Launcher.CancelJob"] = [this](grpc::ClientContext* ctx) {
      v1::CancelJobRequest req;
      req.set_job_id(job_id_);
      v1::CancelJobResponse resp;
      return launcher_stub_->CancelJob(ctx, req, &resp);
    };
    calls["Launcher.DumpStacks"] = [this](grpc::ClientContext* ctx) {
      v1::DumpStacksRequest req;
      req.set_job_id(job_id_);
      v1::DumpStacksResponse resp;
      return launcher_stub_->DumpStacks(ctx, req, &resp);
    };
    calls["Launcher.UpdateJobHosts"] = [this](grpc::ClientContext* ctx) {
      v1::UpdateJobHostsRequest req;
      req.set_job_id(job_id_);
      v1::HostSlots* h = req.add_hosts();
      h->set_host("node-a");
      h->set_slots(2);
      v1::UpdateJobHostsResponse resp;
      return launcher_stub_->UpdateJobHosts(ctx, req, &resp);
    };
    calls["Launcher.WatchJob"] = [this](grpc::ClientContext* ctx) {
      v1::WatchJobRequest req;
      req.set_job_id(job_id_);
      auto reader = launcher_stub_->WatchJob(ctx, req);
      v1::JobEvent e;
      while (reader->Read(&e)) {
      }
      return reader->Finish();
    };
    calls["Launcher.ListAgents"] = [this](grpc::ClientContext* ctx) {
      v1::ListAgentsResponse resp;
      return launcher_stub_->ListAgents(ctx, {}, &resp);
    };
    calls["Launcher.WriteStdin"] = [this](grpc::ClientContext* ctx) {
      v1::WriteStdinResponse resp;
      auto writer = launcher_stub_->WriteStdin(ctx, &resp);
      v1::StdinData d;
      d.set_job_id(job_id_);
      d.set_data("x");
      writer->Write(d);
      writer->WritesDone();
      return writer->Finish();
    };
    calls["AgentGateway.Connect"] = [this](grpc::ClientContext* ctx) {
      auto stream = gateway_stub_->Connect(ctx);
      v1::AgentMessage reg;
      reg.mutable_register_()->set_host("intruder");
      reg.mutable_register_()->set_slots(1);
      stream->Write(reg);
      stream->WritesDone();
      v1::LauncherMessage m;
      while (stream->Read(&m)) {
      }
      return stream->Finish();
    };
    calls["AgentGateway.ReadStdin"] = [this](grpc::ClientContext* ctx) {
      v1::ReadStdinRequest req;
      req.set_job_id(job_id_);
      auto reader = gateway_stub_->ReadStdin(ctx, req);
      v1::StdinData d;
      while (reader->Read(&d)) {
      }
      return reader->Finish();
    };
    return calls;
  }

  std::map<std::string, Call> RendezvousMethods() {
    const std::string scope = "job/" + job_id_ + "/attempt/0";
    std::map<std::string, Call> calls;
    calls["Rendezvous.Set"] = [this, scope](grpc::ClientContext* ctx) {
      v1::SetRequest req;
      req.set_scope(scope);
      req.set_key("k");
      req.set_value("v");
      v1::SetResponse resp;
      return rendezvous_stub_->Set(ctx, req, &resp);
    };
    calls["Rendezvous.Get"] = [this, scope](grpc::ClientContext* ctx) {
      v1::GetRequest req;
      req.set_scope(scope);
      req.set_key("k");
      v1::GetResponse resp;
      return rendezvous_stub_->Get(ctx, req, &resp);
    };
    calls["Rendezvous.Wait"] = [this, scope](grpc::ClientContext* ctx) {
      v1::WaitRequest req;
      req.set_scope(scope);
      req.add_keys("k");
      req.set_timeout_ms(10);
      v1::WaitResponse resp;
      return rendezvous_stub_->Wait(ctx, req, &resp);
    };
    calls["Rendezvous.Add"] = [this, scope](grpc::ClientContext* ctx) {
      v1::AddRequest req;
      req.set_scope(scope);
      req.set_key("n");
      req.set_delta(1);
      v1::AddResponse resp;
      return rendezvous_stub_->Add(ctx, req, &resp);
    };
    calls["Rendezvous.CompareAndSet"] = [this, scope](grpc::ClientContext* ctx) {
      v1::CompareAndSetRequest req;
      req.set_scope(scope);
      req.set_key("c");
      req.set_expect_absent(true);
      req.set_desired("v");
      v1::CompareAndSetResponse resp;
      return rendezvous_stub_->CompareAndSet(ctx, req, &resp);
    };
    return calls;
  }

  static void ExpectRefused(const grpc::Status& s, const Credential& c, const std::string& what) {
    if (c.absent) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << what << ": " << s.error_message();
      EXPECT_EQ(s.error_message(), control::kNoTokenMessage) << what;
      EXPECT_NE(s.error_message().find("no cluster token"), std::string::npos) << what;
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
          << what << ": " << s.error_message();
      EXPECT_EQ(s.error_message(), control::kWrongTokenMessage) << what;
      EXPECT_NE(s.error_message().find("wrong cluster token"), std::string::npos) << what;
    }
  }

  std::unique_ptr<Launcher> launcher_;
  std::unique_ptr<v1::Launcher::Stub> launcher_stub_;
  std::unique_ptr<v1::AgentGateway::Stub> gateway_stub_;
  std::unique_ptr<v1::Rendezvous::Stub> rendezvous_stub_;
  std::unique_ptr<StreamAgent> agent_;
  std::string job_id_, secret_;
};

TEST_F(TokenGateTest, EveryLauncherAndAgentGatewayMethodRefusesAnythingButTheClusterToken) {
  std::map<std::string, Call> calls = ClusterTokenMethods();
  ASSERT_EQ(static_cast<int>(calls.size()),
            MethodCount("hvd.v1.Launcher") + MethodCount("hvd.v1.AgentGateway"))
      << "a method was added to a service: add its call here";
  const std::vector<Credential> refused = {
      {"no token", true, ""},
      {"a wrong token", false, "not-the-token"},
      {"an empty token", false, ""},
      {"the job's secret", false, secret_},  // opens its rendezvous keys, nothing else
  };
  ::testing::internal::CaptureStderr();
  for (const Credential& c : refused) {
    for (const auto& [name, call] : calls) {
      ExpectRefused(call(ContextWith(c).get()), c, name + " with " + c.name);
    }
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  // Refusals are logged, naming the method (at most a line per method and reason per 10 s).
  EXPECT_NE(log.find("refused a call to /hvd.v1.Launcher/SubmitJob: wrong cluster token"),
            std::string::npos)
      << log;

  // None of them got through: one job, still placed; one agent.
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(launcher_stub_->ListJobs(Ctx().get(), {}, &jobs).ok());
  ASSERT_EQ(jobs.jobs_size(), 1);
  EXPECT_EQ(jobs.jobs(0).id(), job_id_);
  EXPECT_EQ(jobs.jobs(0).state(), v1::STARTING);
  v1::ListAgentsResponse agents;
  ASSERT_TRUE(launcher_stub_->ListAgents(Ctx().get(), {}, &agents).ok());
  ASSERT_EQ(agents.agents_size(), 1);
  EXPECT_EQ(agents.agents(0).host(), "host-a");

  // The cluster token passes the gate on every method (what each answers then is its own).
  const Credential cluster{"the cluster token", false, kToken};
  for (const auto& [name, call] : calls) {
    if (name == "AgentGateway.Connect" || name == "Launcher.WatchJob" ||
        name == "AgentGateway.ReadStdin" || name == "Launcher.WriteStdin") {
      continue;  // streams that would wait for the job; the other suites drive them
    }
    const grpc::Status s = call(ContextWith(cluster).get());
    EXPECT_NE(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << name << s.error_message();
    EXPECT_NE(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << name << s.error_message();
  }
}

TEST_F(TokenGateTest, EveryRendezvousMethodRefusesNoTokenAndAWrongOneButTakesTheJobsSecret) {
  std::map<std::string, Call> calls = RendezvousMethods();
  ASSERT_EQ(static_cast<int>(calls.size()), MethodCount("hvd.v1.Rendezvous"))
      << "a method was added to the service: add its call here";
  for (const Credential& c :
       std::vector<Credential>{{"no token", true, ""}, {"a wrong token", false, "not-the-token"}}) {
    for (const auto& [name, call] : calls) {
      ExpectRefused(call(ContextWith(c).get()), c, name + " with " + c.name);
    }
  }
  // The job's secret passes the gate for its own keys on every method.
  const Credential secret{"the job's secret", false, secret_};
  for (const auto& [name, call] : calls) {
    const grpc::Status s = call(ContextWith(secret).get());
    EXPECT_NE(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << name << s.error_message();
    EXPECT_NE(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << name << s.error_message();
  }
}

}  // namespace
}  // namespace hvd::launcherd::testing
