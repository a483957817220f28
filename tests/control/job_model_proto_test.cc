// control/job_model_proto.h: the job model survives the wire both ways (what the launcher's job
// store and hvdrun's client rely on), and the wire-edge checks refuse what the domain types
// cannot say (an explicit -1).
#include "control/job_model_proto.h"

#include <gtest/gtest.h>

#include "control/status_json.h"
#include "testutil/expect.h"

namespace hvd::control {
namespace {

JobStatus FullJob() {
  JobStatus s;
  s.id = "j7";
  s.state = JobState::kFailed;
  s.reason = "rank 1 on b exited with code 3";
  s.spec.argv = {"/bin/train", "--lr", "0.1"};
  s.spec.np = 2;
  s.spec.hosts = {{"a", 1}, {"b", 1}};
  s.spec.env = {{"A", "1"}};
  s.spec.working_dir = "/w";
  s.spec.name = "n";
  s.spec.kill_grace_ms = 0;  // set to 0 is not unset
  s.spec.stall_timeout_ms = 9000;
  s.spec.max_restarts = 2;
  s.spec.network_interfaces = "eth0";
  s.spec.stdin_rank = 1;
  s.spec.queue_timeout_ms = 60000;
  s.spec.run_as = "alice";
  s.spec.gpu_isolation = true;
  RankStatus& r = s.ranks.emplace_back();
  r.placement = {1, 0, 1, 1, 2, "ag-b", "b", 0};
  r.state = RankState::kExited;
  r.pid = 42;
  r.exit_code = 3;
  r.rendezvous_time_ms = 1700000000001;
  s.has_failure = true;
  s.failure = {1, "b", 3, 0, "Traceback", "rank 1 on b exited with code 3"};
  s.previous_failures.push_back({0, "a", 0, 9, "", "rank 0 on a was killed by SIGKILL"});
  s.submit_time_ms = 1700000000000;
  s.attempt = 2;
  s.stall = "rank 0 waits";
  s.network.decided = true;
  s.network.summary = "using eth0";
  s.network.dials.push_back({"eth0", "a", "b", "10.0.0.2:1", true, "", 12});
  s.queued_since_ms = 1700000000002;
  return s;
}

TEST(JobModelProto, AJobStatusRoundTripsWhole) {
  const JobStatus s = FullJob();
  v1::JobStatus p;
  ToProto(s, &p);
  const JobStatus back = FromProto(p);
  EXPECT_EQ(JobJson(back, true), JobJson(s, true));
  EXPECT_EQ(back.spec.env, s.spec.env);       // JSON leaves the environment out
  EXPECT_EQ(back.spec.start_timeout_ms, -1);  // unset stays unset
  EXPECT_EQ(back.spec.kill_grace_ms, 0);
  EXPECT_EQ(back.ranks.at(0).placement.agent_id, "ag-b");
  EXPECT_EQ(back.spec.run_as, "alice");
  EXPECT_TRUE(back.spec.gpu_isolation);
  EXPECT_FALSE(FromProto(v1::JobStatus()).spec.gpu_isolation);
}

TEST(JobModelProto, AnElasticJobKeepsItsSpecAndMembership) {
  JobStatus s = FullJob();
  s.spec.min_np = 1;
  s.spec.max_np = 2;
  s.spec.elastic_timeout_ms = 1500;
  s.spec.reset_limit = 7;
  s.elastic.generation = 2;
  s.elastic.workers = {0, 3};
  s.elastic.resets = 2;
  s.elastic.below_min_since_ms = 1700000000003;
  s.elastic.events.push_back({0, 1700000000004, {0, 1, 3}, "generation 0: 3 workers"});
  s.elastic.events.push_back({2, 1700000000005, {0, 3}, "generation 2: worker 1 left"});
  v1::JobStatus p;
  ToProto(s, &p);
  const JobStatus back = FromProto(p);
  EXPECT_EQ(back.spec.min_np, 1);
  EXPECT_EQ(back.spec.max_np, 2);
  EXPECT_EQ(back.spec.elastic_timeout_ms, 1500);
  EXPECT_EQ(back.spec.reset_limit, 7);
  EXPECT_TRUE(IsElastic(back.spec));
  EXPECT_EQ(back.elastic.generation, 2);
  EXPECT_EQ(back.elastic.workers, (std::vector<int>{0, 3}));
  EXPECT_EQ(back.elastic.resets, 2);
  EXPECT_EQ(back.elastic.below_min_since_ms, 1700000000003);
  ASSERT_EQ(back.elastic.events.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back.elastic.events[i].generation, s.elastic.events[i].generation);
    EXPECT_EQ(back.elastic.events[i].time_ms, s.elastic.events[i].time_ms);
    EXPECT_EQ(back.elastic.events[i].workers, s.elastic.events[i].workers);
    EXPECT_EQ(back.elastic.events[i].what, s.elastic.events[i].what);
  }
  // A summary keeps the numbers and the membership, not the events.
  v1::JobStatus sp;
  ToSummaryProto(s, &sp);
  const JobStatus summary = FromProto(sp);
  EXPECT_EQ(summary.spec.min_np, 1);
  EXPECT_EQ(summary.spec.max_np, 2);
  EXPECT_EQ(summary.elastic.generation, 2);
  EXPECT_EQ(summary.elastic.workers, (std::vector<int>{0, 3}));
  EXPECT_TRUE(summary.elastic.events.empty());

  // A fixed job: no elastic fields on the wire, the defaults read back.
  v1::JobStatus fp;
  ToProto(FullJob(), &fp);
  EXPECT_FALSE(fp.has_elastic());
  const JobStatus fixed = FromProto(fp);
  EXPECT_FALSE(IsElastic(fixed.spec));
  EXPECT_EQ(fixed.spec.elastic_timeout_ms, 600000);
  EXPECT_EQ(fixed.elastic.generation, -1);
}

TEST(JobModelProto, EventsAndAgentsKeepEveryField) {
  JobEvent e;
  e.kind = JobEvent::Kind::kOutput;
  e.output = {3, true, "line", 17};
  v1::JobEvent p;
  ToProto(e, &p);
  JobEvent back;
  ASSERT_TRUE(FromProto(p, &back));
  EXPECT_EQ(back.kind, JobEvent::Kind::kOutput);
  EXPECT_EQ(back.output.seq, 17);  // hvdrun resumes a broken stream from it
  EXPECT_TRUE(back.output.is_stderr);
  EXPECT_FALSE(FromProto(v1::JobEvent(), &back)) << "an event of no known kind";

  AgentInfo a;
  a.id = "ag";
  a.state = "READY";
  a.slots_in_use = 3;
  a.last_heartbeat_ms = 1700000000456;
  a.interfaces.push_back({"eth0", "10.0.0.1", 24, false, true});
  v1::AgentInfo ap;
  ToProto(a, &ap);
  EXPECT_EQ(AgentJson(AgentInfoFromProto(ap)), AgentJson(a));
}

TEST(JobModelProto, TheWireEdgeRefusesAnExplicitMinusOne) {
  v1::JobSpec p;
  p.add_argv("/bin/true");
  p.set_np(2);
  EXPECT_TRUE(ValidateJobSpec(p).ok());
  p.set_stdin_rank(-1);  // unset in the domain spec, but a client said it
  EXPECT_HAS(ValidateJobSpec(p).message(), "--stdin -1 names no rank");
  p.clear_stdin_rank();
  p.set_start_timeout_ms(-1);
  EXPECT_HAS(ValidateJobSpec(p).message(), "start_timeout_ms=-1 (--start-timeout)");
  // The domain validator takes -1 as unset and checks any other value.
  JobSpec s = FromProto(p);
  EXPECT_TRUE(ValidateJobSpec(s).ok());
  s.start_timeout_ms = -2;
  EXPECT_HAS(ValidateJobSpec(s).message(), "start_timeout_ms=-2");
}

}  // namespace
}  // namespace hvd::control
