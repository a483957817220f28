// The JSON shape REST and hvdrun --json share (control/status_json.h): every field present even
// when zero, 64-bit integers as numbers, enums by name, absent parts null.
#include "control/status_json.h"

#include <gtest/gtest.h>

namespace hvd::control {
namespace {

using nlohmann::json;

JobStatus FinishedJob() {
  JobStatus s;
  s.id = "j1";
  s.state = JobState::kSucceeded;
  s.spec.argv.push_back("/bin/true");
  s.spec.np = 1;
  s.spec.detached = true;
  s.spec.env["SECRET"] = "hunter2";
  s.submit_time_ms = 1700000000123;  // beyond 2^32: must stay an exact number
  s.queued_since_ms = 1700000000123;
  s.end_time_ms = 1700000000999;
  RankStatus& r = s.ranks.emplace_back();  // rank 0, exit code 0, signal 0: all zero values
  r.state = RankState::kExited;
  r.placement.host = "h";
  return s;
}

TEST(StatusJson, ZeroValuesArePresentAndIntegersAreNumbers) {
  const json j = JobJson(FinishedJob(), /*full=*/true);
  const json& rank = j.at("ranks").at(0);
  EXPECT_EQ(rank.at("rank"), 0);
  EXPECT_EQ(rank.at("exit_code"), 0);
  EXPECT_EQ(rank.at("signal"), 0);
  EXPECT_EQ(rank.at("pid"), 0);
  EXPECT_EQ(rank.at("state"), "EXITED");
  EXPECT_EQ(j.at("exit_code"), 0);
  EXPECT_EQ(j.at("attempt"), 0);
  EXPECT_EQ(j.at("stall"), "");
  EXPECT_EQ(j.at("state"), "SUCCEEDED");
  EXPECT_TRUE(j.at("submit_time_ms").is_number_integer()) << j.dump();
  EXPECT_EQ(j.at("submit_time_ms").get<int64_t>(), 1700000000123);
  EXPECT_EQ(j.at("queued_since_ms").get<int64_t>(), 1700000000123);
  EXPECT_EQ(j.at("start_time_ms"), 0);
  EXPECT_TRUE(j.at("failure").is_null());
  EXPECT_TRUE(j.at("network").is_null());  // nothing decided
  EXPECT_EQ(j.at("previous_failures"), json::array());
  EXPECT_EQ(j.at("hosts"), json::array());
  EXPECT_EQ(j.at("detached"), true);
  EXPECT_EQ(j.at("queue_timeout_ms"), 0);
  EXPECT_TRUE(j.at("kill_grace_ms").is_null());  // unset: the launcher's default
  EXPECT_EQ(j.at("run_as"), "");                 // no --run-as: the agent's own user
  EXPECT_FALSE(j.contains("env")) << "the environment may hold secrets: " << j.dump();
  EXPECT_EQ(JsonText(j).find("hunter2"), std::string::npos);
}

TEST(StatusJson, EveryFieldOfTheFullAndSummaryShapes) {
  JobStatus s = FinishedJob();
  s.spec.kill_grace_ms = 0;
  s.has_failure = true;
  s.failure.rank = 0;
  s.network.decided = true;
  s.network.dials.emplace_back().from = "a";
  const json full = JobJson(s, true);
  std::vector<std::string> keys;
  for (const auto& [k, v] : full.items()) keys.push_back(k);
  const std::vector<std::string> want = {"argv",
                                         "attempt",
                                         "detached",
                                         "end_time_ms",
                                         "exit_code",
                                         "failure",
                                         "hosts",
                                         "id",
                                         "kill_grace_ms",
                                         "max_restarts",
                                         "name",
                                         "network",
                                         "network_interfaces",
                                         "np",
                                         "previous_failures",
                                         "queue_timeout_ms",
                                         "queued_since_ms",
                                         "ranks",
                                         "reason",
                                         "run_as",
                                         "stall",
                                         "stall_since_ms",
                                         "stall_timeout_ms",
                                         "start_time_ms",
                                         "start_timeout_ms",
                                         "state",
                                         "submit_time_ms",
                                         "working_dir"};
  EXPECT_EQ(keys, want);                   // nlohmann sorts keys
  EXPECT_EQ(full.at("kill_grace_ms"), 0);  // set to 0 is not unset
  EXPECT_EQ(full.at("failure").at("rank"), 0);
  EXPECT_EQ(full.at("failure").at("exit_code"), 0);
  EXPECT_EQ(full.at("network").at("dials").at(0).at("from"), "a");
  EXPECT_EQ(full.at("network").at("dials").at(0).at("ok"), false);
  const json summary = JobJson(s, false);
  EXPECT_FALSE(summary.contains("ranks"));
  for (const auto& [k, v] : summary.items()) EXPECT_EQ(full.at(k), v) << k;
}

// hvdrun --run-as USER: whom the ranks run as, for `hvdrun status JOB --json` and REST.
TEST(StatusJson, RunAs) {
  JobStatus s = FinishedJob();
  s.spec.run_as = "alice";
  EXPECT_EQ(JobJson(s, true).at("run_as"), "alice");
}

TEST(StatusJson, Agents) {
  std::vector<AgentInfo> agents(1);
  AgentInfo* a = &agents[0];
  a->id = "ag";
  a->last_heartbeat_ms = 1700000000456;
  a->interfaces.emplace_back().name = "lo";
  const json j = AgentListJson(agents);
  const json& agent = j.at("agents").at(0);
  EXPECT_EQ(agent.at("id"), "ag");
  EXPECT_EQ(agent.at("slots_in_use"), 0);
  EXPECT_EQ(agent.at("gpus"), 0);
  EXPECT_EQ(agent.at("last_heartbeat_ms").get<int64_t>(), 1700000000456);
  EXPECT_EQ(agent.at("interfaces").at(0).at("up"), false);
  EXPECT_EQ(JsonText(j).back(), '\n');
}

}  // namespace
}  // namespace hvd::control
