// The real Launcher on 127.0.0.1: REST/metrics, token checks, queueing without agents, agent
// loss and shutdown. The job life over the agent protocol is in agent_stream_test.cc.
#include "launcherd/launcher.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "launcher_test_util.h"

namespace hvd::launcherd::testing {
namespace {

using nlohmann::json;

std::string Submit(v1::Launcher::Stub& stub, int np,
                   std::vector<std::pair<std::string, int>> hosts = {}) {
  v1::SubmitJobRequest req;
  req.mutable_spec()->add_argv("/bin/true");
  req.mutable_spec()->set_np(np);
  for (const auto& [h, n] : hosts) {
    v1::HostSlots* hs = req.mutable_spec()->add_hosts();
    hs->set_host(h);
    hs->set_slots(n);
  }
  v1::SubmitJobResponse resp;
  grpc::Status s = stub.SubmitJob(Ctx().get(), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp.job_id();
}

TEST(LauncherTest, RestAndMetrics) {
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  auto http = Http(*launcher);

  auto res = http.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "ok\n");

  res = http.Get("/v1/jobs");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body), json::parse(R"({"jobs": []})"));

  res = http.Get("/v1/jobs/nope");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_NE(json::parse(res->body).at("error").get<std::string>().find("nope"), std::string::npos);

  res = http.Get("/v1/jobs/bad%20id!");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_TRUE(json::parse(res->body).contains("error"));

  for (const char* path : {"/v1/bogus", "/", "/v1/jobs/a/b"}) {
    res = http.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 404) << path;
    EXPECT_NE(json::parse(res->body).at("error").get<std::string>().find("no such endpoint"),
              std::string::npos);
  }
  res = http.Post("/v1/jobs", "{}", "application/json");
  ASSERT_TRUE(res);
  EXPECT_GE(res->status, 400);
  EXPECT_TRUE(json::parse(res->body).contains("error"));

  StreamAgent agent(launcher->grpc_address(), "metrics-host", 2);
  v1::LauncherMessage ack;
  ASSERT_TRUE(agent.Next(&ack));
  res = http.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  for (const char* name : {"hvd_agents{state=\"READY\"} 1", "hvd_jobs{state=\"PENDING\"} 0",
                           "hvd_ranks_running 0", "hvd_rendezvous_operations_total{op=\"set\"}",
                           "hvd_agent_heartbeat_age_seconds{agent=\""}) {
    EXPECT_NE(res->body.find(name), std::string::npos) << name << "\n" << res->body;
  }
  res = http.Get("/v1/agents");
  ASSERT_TRUE(res);
  json agents = json::parse(res->body).at("agents");
  ASSERT_EQ(agents.size(), 1u);
  EXPECT_EQ(agents[0].at("host"), "metrics-host");
  EXPECT_EQ(agents[0].at("slots"), 2);
  EXPECT_EQ(agents[0].at("state"), "READY");
}

TEST(LauncherTest, CallsWithoutTheTokenAreRefused) {
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  auto stub = v1::Launcher::NewStub(control::NewChannel(launcher->grpc_address()));
  v1::ListJobsResponse resp;
  grpc::ClientContext bare;
  grpc::Status s = stub->ListJobs(&bare, {}, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  s = stub->ListJobs(Ctx("wrong").get(), {}, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  v1::SubmitJobResponse submitted;
  s = stub->SubmitJob(Ctx("wrong").get(), {}, &submitted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  s = stub->ListJobs(Ctx().get(), {}, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();

  // An agent with the wrong token never registers.
  StreamAgent intruder(launcher->grpc_address(), "evil", 8, "wrong");
  EXPECT_EQ(intruder.WaitClosed().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  v1::ListAgentsResponse agents;
  ASSERT_TRUE(stub->ListAgents(Ctx().get(), {}, &agents).ok());
  EXPECT_EQ(agents.agents_size(), 0);
}

TEST(LauncherTest, SubmitValidatesTheSpec) {
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  auto stub = v1::Launcher::NewStub(control::NewChannel(launcher->grpc_address()));
  v1::SubmitJobRequest req;
  req.mutable_spec()->set_np(2);
  v1::SubmitJobResponse resp;
  grpc::Status s = stub->SubmitJob(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("no program"), std::string::npos) << s.error_message();
  req.mutable_spec()->add_argv("./train");
  (*req.mutable_spec()->mutable_env())["HVD_SIZE"] = "9";
  s = stub->SubmitJob(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("HVD_SIZE"), std::string::npos) << s.error_message();
}

TEST(LauncherTest, WithoutAgentsJobsWaitWithAReason) {
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  auto stub = v1::Launcher::NewStub(control::NewChannel(launcher->grpc_address()));
  const std::string any = Submit(*stub, 2);
  v1::JobStatus st = WaitJob(*stub, any, [](const v1::JobStatus&) { return true; });
  EXPECT_EQ(st.state(), v1::PENDING);
  EXPECT_EQ(st.reason(), "needs 2 slots; no agent registered");

  // Rule: a named host without an agent waits (its agent may still register) instead of failing.
  const std::string named = Submit(*stub, 1, {{"gpu-node-7", 1}});
  st = WaitJob(*stub, named, [](const v1::JobStatus&) { return true; });
  EXPECT_EQ(st.state(), v1::PENDING);
  EXPECT_EQ(st.reason(), "no agent on host gpu-node-7 yet (no agent registered)");

  // WatchJob without follow: the history so far, ending with the current status.
  v1::WatchJobRequest wreq;
  wreq.set_job_id(named);
  auto ctx = Ctx();
  auto reader = stub->WatchJob(ctx.get(), wreq);
  std::vector<v1::JobEvent> events;
  for (v1::JobEvent ev; events.size() < 100 && reader->Read(&ev);) events.push_back(ev);
  EXPECT_TRUE(reader->Finish().ok());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().status().state(), v1::PENDING);
  EXPECT_EQ(events.back().status().reason(), st.reason());
  bool agents_ready = false;
  for (const v1::JobEvent& e : events) agents_ready |= e.progress() == "agents ready 0/1";
  EXPECT_TRUE(agents_ready);

  v1::CancelJobRequest creq;
  creq.set_job_id(named);
  v1::CancelJobResponse cresp;
  ASSERT_TRUE(stub->CancelJob(Ctx().get(), creq, &cresp).ok());
  EXPECT_EQ(cresp.state(), v1::CANCELLED);
  v1::ListJobsResponse list;
  ASSERT_TRUE(stub->ListJobs(Ctx().get(), {}, &list).ok());
  ASSERT_EQ(list.jobs_size(), 2);
  EXPECT_EQ(list.jobs(0).id(), any);
  EXPECT_EQ(list.jobs(1).exit_code(), 130);

  v1::GetJobRequest greq;
  greq.set_job_id("nope");
  EXPECT_EQ(stub->GetJob(Ctx().get(), greq, &st).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(LauncherTest, SilentAgentIsLostAndItsJobFails) {
  LauncherOptions o;
  o.heartbeat_interval = 50ms;
  // This agent never sends a heartbeat: registration, the MASTER_PORT step and StartRank must
  // all fit in one lease, with room for a loaded machine (300 ms lost the agent first, 1 in 20).
  o.lease = 2000ms;
  o.client_lease = 60s;  // the test's Submit is attached and never watches: keep it from cancelling
  auto launcher = StartLauncher(o);
  ASSERT_TRUE(launcher);
  auto stub = v1::Launcher::NewStub(control::NewChannel(launcher->grpc_address()));
  StreamAgent agent(launcher->grpc_address(), "quiet-host", 1);
  v1::LauncherMessage m;
  ASSERT_TRUE(agent.Next(&m));
  EXPECT_EQ(m.ack().lease_ms(), 2000);
  EXPECT_EQ(m.ack().heartbeat_interval_ms(), 50);
  const std::string id = Submit(*stub, 1);
  ASSERT_TRUE(agent.Next(&m));
  ASSERT_TRUE(m.has_start());
  agent.Event(id, 0, v1::RANK_RUNNING);
  // ... and then nothing, not even heartbeats.
  v1::JobStatus st =
      WaitJob(*stub, id, [](const v1::JobStatus& s) { return s.state() == v1::FAILED; });
  EXPECT_EQ(st.failure().message().rfind("agent on quiet-host lost", 0), 0u)
      << st.failure().message();
  EXPECT_EQ(st.ranks(0).state(), v1::RANK_KILLED);
  v1::ListAgentsResponse agents;
  ASSERT_TRUE(stub->ListAgents(Ctx().get(), {}, &agents).ok());
  ASSERT_EQ(agents.agents_size(), 1);
  EXPECT_EQ(agents.agents(0).state(), "LOST");
}

TEST(LauncherTest, StopCancelsJobsAndWaitsForTheirRanks) {
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  auto stub = v1::Launcher::NewStub(control::NewChannel(launcher->grpc_address()));
  StreamAgent agent(launcher->grpc_address(), "h", 1);
  v1::LauncherMessage m;
  ASSERT_TRUE(agent.Next(&m));
  const std::string id = Submit(*stub, 1);
  ASSERT_TRUE(agent.Next(&m));
  agent.Event(id, 0, v1::RANK_RUNNING);
  WaitJob(*stub, id, [](const v1::JobStatus& s) { return s.state() == v1::RUNNING; });
  auto ctx = Ctx();
  v1::WatchJobRequest wreq;
  wreq.set_job_id(id);
  wreq.set_follow(true);
  auto watch = stub->WatchJob(ctx.get(), wreq);

  std::thread stopper([&] { launcher->Stop(); });
  ASSERT_TRUE(agent.Next(&m));
  ASSERT_TRUE(m.has_stop()) << m.ShortDebugString();
  EXPECT_EQ(m.stop().job_id(), id);
  EXPECT_EQ(m.stop().grace_ms(), 1500);
  // The launcher waits for the agent's report before it closes, so the watcher sees the end.
  agent.Event(id, 0, v1::RANK_KILLED);
  launcher->Wait();
  stopper.join();
  v1::JobEvent last;
  for (v1::JobEvent e; watch->Read(&e);) last = e;
  EXPECT_TRUE(watch->Finish().ok());
  EXPECT_EQ(last.status().state(), v1::CANCELLED);
  EXPECT_EQ(last.status().reason(), "cancelled: the launcher is shutting down");
  EXPECT_EQ(last.status().ranks(0).state(), v1::RANK_KILLED);
  agent.WaitClosed();
  launcher->Stop();  // idempotent
}

TEST(LauncherTest, StartFailuresNameTheAddress) {
  LauncherOptions o;
  o.listen = "127.0.0.1:0";
  std::unique_ptr<Launcher> l;
  Status s = Launcher::Start(o, &l);  // no token
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--token-file"), std::string::npos) << s.message();

  auto first = StartLauncher();
  ASSERT_TRUE(first);
  o.token = kToken;
  o.listen = first->grpc_address();  // taken
  s = Launcher::Start(o, &l);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(first->grpc_address()), std::string::npos) << s.message();
  o.listen = "127.0.0.1:0";
  o.http_listen = first->http_address();  // taken
  s = Launcher::Start(o, &l);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("HTTP on " + first->http_address()), std::string::npos) << s.message();
  o.http_listen.clear();
  o.listen = "127.0.0.1:99999";
  s = Launcher::Start(o, &l);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--listen"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace hvd::launcherd::testing
