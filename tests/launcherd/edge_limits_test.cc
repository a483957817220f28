// What the real Launcher accepts at its gRPC edge (issue 20, findings 4 and 6): registrations and
// job specs checked field by field with hvdrun's limits, placement that does not depend on the
// slots an agent claims, and ListJobs in pages of summaries that fit gRPC's default 4 MiB however
// many large jobs the launcher keeps.
#include <gtest/gtest.h>

#include <chrono>

#include "control/spec_limits.h"
#include "launcher_test_util.h"

namespace hvd::launcherd::testing {
namespace {

double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// The launcher answers at once: a REST health check and a gRPC call, each within a second.
void ExpectResponsive(const Launcher& l, v1::Launcher::Stub& stub) {
  auto t = std::chrono::steady_clock::now();
  auto ctx = control::NewClientContext(kToken, 1s);
  v1::ListAgentsResponse agents;
  grpc::Status s = stub.ListAgents(ctx.get(), v1::ListAgentsRequest(), &agents);
  EXPECT_TRUE(s.ok()) << s.error_message();
  httplib::Client http = Http(l);
  http.set_read_timeout(1);
  auto res = http.Get("/healthz");
  ASSERT_TRUE(res) << "GET /healthz failed";
  EXPECT_EQ(res->status, 200);
  EXPECT_LT(MsSince(t), 1000);
}

v1::JobSpec Spec(int np) {
  v1::JobSpec spec;
  spec.add_argv("/bin/true");
  spec.set_np(np);
  return spec;
}

TEST(EdgeLimits, RegistrationWithHugeSlotCountIsRefusedAndLauncherStaysResponsive) {
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  auto stub = v1::Launcher::NewStub(control::NewChannel(launcher->grpc_address()));
  StreamAgent bad(launcher->grpc_address(), "node-b", 2147483647);
  const grpc::Status s = bad.WaitClosed(5s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("2147483647 slots"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("hvd-agent --slots N"), std::string::npos) << s.error_message();
  // Not registered, so nothing is ever placed on it.
  v1::ListAgentsResponse agents;
  ASSERT_TRUE(stub->ListAgents(Ctx().get(), v1::ListAgentsRequest(), &agents).ok());
  EXPECT_EQ(agents.agents_size(), 0);
  // A job submitted now waits; the launcher answers everything at once.
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec(4);
  v1::SubmitJobResponse resp;
  ASSERT_TRUE(stub->SubmitJob(Ctx().get(), req, &resp).ok());
  ExpectResponsive(*launcher, *stub);
}

// The largest registration allowed (1 << 20 slots, hvdrun's embedded agent may have np): a job
// is placed on it at once, and nothing the launcher does afterwards costs O(slots).
TEST(EdgeLimits, JobOnAgentWithMostSlotsIsPlacedInRankTime) {
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  auto stub = v1::Launcher::NewStub(control::NewChannel(launcher->grpc_address()));
  StreamAgent agent(launcher->grpc_address(), "node-a", control::kMaxSlotsPerHost);
  v1::LauncherMessage ack;
  ASSERT_TRUE(agent.Next(&ack));
  ASSERT_TRUE(ack.has_ack());
  const auto t = std::chrono::steady_clock::now();
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec(4);
  v1::SubmitJobResponse resp;
  ASSERT_TRUE(stub->SubmitJob(Ctx().get(), req, &resp).ok());
  for (int i = 0; i < 4; ++i) {
    v1::LauncherMessage m;
    ASSERT_TRUE(agent.Next(&m, 5s)) << "StartRank " << i;
    ASSERT_TRUE(m.has_start()) << m.ShortDebugString();
  }
  EXPECT_LT(MsSince(t), 1000);
  ExpectResponsive(*launcher, *stub);
  v1::ListAgentsResponse agents;
  ASSERT_TRUE(stub->ListAgents(Ctx().get(), v1::ListAgentsRequest(), &agents).ok());
  ASSERT_EQ(agents.agents_size(), 1);
  EXPECT_EQ(agents.agents(0).slots_in_use(), 4);
  for (int r = 0; r < 4; ++r) agent.Event(resp.job_id(), r, v1::RANK_EXITED);
  v1::JobStatus done = WaitJob(*stub, resp.job_id(),
                               [](const v1::JobStatus& st) { return st.state() == v1::SUCCEEDED; });
  EXPECT_EQ(done.state(), v1::SUCCEEDED);
}

TEST(EdgeLimits, SubmitJobChecksEveryFieldWithTheCliLimits) {
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  auto stub = v1::Launcher::NewStub(control::NewChannel(launcher->grpc_address()));
  auto submit = [&](const v1::JobSpec& spec) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    v1::SubmitJobResponse resp;
    return stub->SubmitJob(Ctx().get(), req, &resp);
  };
  v1::JobSpec argv = Spec(1);
  for (int i = 0; i < 3; ++i) argv.add_argv(std::string(100 << 10, 'a'));
  grpc::Status s = submit(argv);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("SubmitJob: the command line is"), std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("the limit is 262144 bytes (256 KiB)"), std::string::npos)
      << s.error_message();

  v1::JobSpec env = Spec(1);
  for (int i = 0; i < 6; ++i) {
    (*env.mutable_env())["V" + std::to_string(i)] = std::string(100 << 10, 'v');
  }
  s = submit(env);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("the limit is 524288 bytes (512 KiB)"), std::string::npos)
      << s.error_message();

  v1::JobSpec hosts = Spec(2);
  v1::HostSlots* h = hosts.add_hosts();
  h->set_host("node-a\n");
  h->set_slots(2);
  s = submit(hosts);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("host list (-H)"), std::string::npos) << s.error_message();

  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stub->ListJobs(Ctx().get(), v1::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0) << "a refused spec left a job behind";
}

// 500 jobs with 8 KiB command lines (and an environment): more than one 4 MiB message in full.
// Listed in pages of summaries, each far below gRPC's default limit, in submit order, every job
// once; GetJob still has the whole record.
TEST(EdgeLimits, ListJobsPagesSummariesOfManyLargeJobs) {
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  auto stub = v1::Launcher::NewStub(control::NewChannel(launcher->grpc_address()));
  std::vector<std::string> ids;
  v1::JobSpec spec = Spec(2);
  for (int i = 0; i < 16; ++i) spec.add_argv(std::string(512, 'a' + i));  // 8 KiB of arguments
  (*spec.mutable_env())["DATA"] = std::string(2048, 'e');
  v1::HostSlots* h = spec.add_hosts();
  h->set_host("nowhere");  // no agent: every job waits, PENDING
  h->set_slots(2);
  for (int i = 0; i < 500; ++i) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    v1::SubmitJobResponse resp;
    grpc::Status s = stub->SubmitJob(Ctx().get(), req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ids.push_back(resp.job_id());
  }
  std::vector<std::string> listed;
  v1::ListJobsRequest req;
  int pages = 0;
  do {
    v1::ListJobsResponse resp;
    grpc::Status s = stub->ListJobs(Ctx().get(), req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_LT(resp.ByteSizeLong(), size_t{1} << 21) << "page " << pages;
    for (const v1::JobStatus& j : resp.jobs()) {
      listed.push_back(j.id());
      EXPECT_TRUE(j.summarized());
      EXPECT_EQ(j.spec().env_size(), 0);
      EXPECT_EQ(j.spec().np(), 2);
      EXPECT_EQ(j.state(), v1::PENDING);
      size_t argv_bytes = 0;
      for (const std::string& a : j.spec().argv()) argv_bytes += a.size();
      EXPECT_LE(argv_bytes, 1024u + 3);
      const std::string& last = j.spec().argv(j.spec().argv_size() - 1);
      EXPECT_EQ(last.substr(last.size() - 3), "...");
    }
    req.set_page_token(resp.next_page_token());
    ++pages;
  } while (!req.page_token().empty() && pages < 100);
  EXPECT_EQ(pages, 5);  // the default page size is 100
  EXPECT_EQ(listed, ids);

  // page_size is honoured, and capped.
  v1::ListJobsRequest small;
  small.set_page_size(7);
  v1::ListJobsResponse resp;
  ASSERT_TRUE(stub->ListJobs(Ctx().get(), small, &resp).ok());
  EXPECT_EQ(resp.jobs_size(), 7);
  EXPECT_FALSE(resp.next_page_token().empty());
  small.set_page_size(100000);
  resp.Clear();
  ASSERT_TRUE(stub->ListJobs(Ctx().get(), small, &resp).ok());
  EXPECT_EQ(resp.jobs_size(), 500);
  EXPECT_TRUE(resp.next_page_token().empty());
  small.set_page_token("garbage");
  grpc::Status s = stub->ListJobs(Ctx().get(), small, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // The full record is one GetJob away.
  v1::GetJobRequest get;
  get.set_job_id(ids[0]);
  v1::JobStatus full;
  ASSERT_TRUE(stub->GetJob(Ctx().get(), get, &full).ok());
  EXPECT_FALSE(full.summarized());
  EXPECT_EQ(full.spec().argv_size(), 17);
  EXPECT_EQ(full.spec().env().at("DATA").size(), 2048u);
}

}  // namespace
}  // namespace hvd::launcherd::testing
