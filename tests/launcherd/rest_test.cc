// The launcher's REST endpoint beyond the basics in launcher_test.cc: methods other than GET
// (405 with Allow), ?state= filtering of /v1/jobs, and a job given a queue timeout failing after
// it (with how long it waited) while one without keeps waiting. No agent: every job stays PENDING.
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "launcher_test_util.h"
#include "testutil/expect.h"

namespace hvd::launcherd::testing {
namespace {

using nlohmann::json;

std::string Submit(v1::Launcher::Stub& stub, int64_t queue_timeout_ms) {
  v1::SubmitJobRequest req;
  req.mutable_spec()->add_argv("/bin/true");
  req.mutable_spec()->set_np(1);
  req.mutable_spec()->set_detached(true);
  req.mutable_spec()->set_queue_timeout_ms(queue_timeout_ms);
  v1::SubmitJobResponse resp;
  grpc::Status s = stub.SubmitJob(Ctx().get(), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp.job_id();
}

json Jobs(httplib::Client& http, const std::string& query, int want_status = 200) {
  auto res = http.Get(("/v1/jobs" + query).c_str());
  EXPECT_TRUE(res) << query;
  if (!res) return nullptr;
  EXPECT_EQ(res->status, want_status) << query << ": " << res->body;
  return json::parse(res->body);
}

TEST(RestTest, OtherMethodsAre405WithAllow) {
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  auto http = Http(*launcher);
  for (const char* path : {"/healthz", "/metrics", "/v1/jobs", "/v1/jobs/abc", "/v1/agents"}) {
    for (const char* method : {"POST", "PUT", "DELETE", "PATCH"}) {
      const std::string m = method;
      httplib::Result res = m == "POST"     ? http.Post(path, "{}", "application/json")
                            : m == "PUT"    ? http.Put(path, "{}", "application/json")
                            : m == "DELETE" ? http.Delete(path)
                                            : http.Patch(path, "{}", "application/json");
      ASSERT_TRUE(res) << method << " " << path;
      EXPECT_EQ(res->status, 405) << path;
      EXPECT_EQ(res->get_header_value("Allow"), "GET, HEAD, OPTIONS") << path;
      EXPECT_HAS(json::parse(res->body).at("error").get<std::string>(), "read-only");
    }
    auto res = http.Options(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 204) << path;
    EXPECT_EQ(res->get_header_value("Allow"), "GET, HEAD, OPTIONS") << path;
    res = http.Head(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, path == std::string("/v1/jobs/abc") ? 404 : 200) << path;
  }
  auto res = http.Post("/v1/nothing", "{}", "application/json");  // unknown stays unknown
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
}

TEST(RestTest, StateFilterAndQueueTimeout) {
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  auto stub = v1::Launcher::NewStub(control::NewChannel(launcher->grpc_address()));
  auto http = Http(*launcher);
  const std::string waits = Submit(*stub, 0);
  const std::string gives_up = Submit(*stub, 300);

  json job;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto res = http.Get(("/v1/jobs/" + gives_up).c_str());
    ASSERT_TRUE(res);
    job = json::parse(res->body);
    if (job.at("state") != "PENDING") break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(job.at("state"), "FAILED") << job.dump(2);
  const std::string message = job.at("failure").at("message");
  EXPECT_HAS(message, "for slots (--queue-timeout 0.3 s): ");
  EXPECT_HAS(message, "waited ");
  EXPECT_HAS(job.at("reason").get<std::string>(), "--queue-timeout");
  EXPECT_EQ(job.at("queue_timeout_ms"), 300);
  EXPECT_EQ(job.at("exit_code"), 1);
  EXPECT_GE(job.at("end_time_ms").get<int64_t>() - job.at("queued_since_ms").get<int64_t>(), 300);

  json pending = Jobs(http, "?state=PENDING").at("jobs");
  ASSERT_EQ(pending.size(), 1u) << pending.dump(2);
  EXPECT_EQ(pending[0].at("id"), waits);
  EXPECT_GT(pending[0].at("queued_since_ms").get<int64_t>(), 0);
  EXPECT_EQ(pending[0].at("queued_since_ms"), pending[0].at("submit_time_ms"));
  json failed = Jobs(http, "?state=failed").at("jobs");  // any case
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].at("id"), gives_up);
  EXPECT_EQ(Jobs(http, "?state=pending,FAILED").at("jobs").size(), 2u);
  EXPECT_EQ(Jobs(http, "?state=RUNNING").at("jobs").size(), 0u);
  EXPECT_EQ(Jobs(http, "").at("jobs").size(), 2u);
  const std::string error = Jobs(http, "?state=running,bogus", 400).at("error");
  EXPECT_HAS(error, "'BOGUS' in ?state=running,bogus is not a job state");
  EXPECT_HAS(error, "PENDING, STARTING, RUNNING, SUCCEEDED, FAILED, CANCELLED, RESTARTING");
}

}  // namespace
}  // namespace hvd::launcherd::testing
