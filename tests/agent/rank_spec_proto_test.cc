// The agent's edge (agent/launcher_client.h): StartRank becomes the RankSpec that travels to the
// spawn, a RankReport becomes the RankEvent the launcher reads; no field is lost either way.
#include <gtest/gtest.h>

#include "agent/launcher_client.h"

namespace hvd::agent {
namespace {

TEST(RankSpecProtoTest, StartRankKeepsEveryFieldTheAgentUses) {
  hvd::v1::StartRank p;
  p.set_job_id("j7");
  p.set_attempt(3);
  p.mutable_placement()->set_rank(5);
  p.mutable_placement()->set_slot(2);
  p.mutable_placement()->set_local_rank(1);  // in the env already; also which GPU is its own
  p.add_argv("./train");
  p.add_argv("--epochs=1");
  (*p.mutable_env())["HVD_RANK"] = "5";
  (*p.mutable_env())["A"] = "b";
  p.set_working_dir("/work");
  p.set_forward_stdin(true);
  p.set_run_as("alice");
  p.set_gpu_isolation(true);

  const RankSpec r = RankSpecFromProto(p);
  EXPECT_EQ(r.job_id, "j7");
  EXPECT_EQ(r.attempt, 3);
  EXPECT_EQ(r.rank, 5);
  EXPECT_EQ(r.slot, 2);
  EXPECT_EQ(r.local_rank, 1);
  EXPECT_EQ(r.argv, (std::vector<std::string>{"./train", "--epochs=1"}));
  EXPECT_EQ(r.env, (std::map<std::string, std::string>{{"A", "b"}, {"HVD_RANK", "5"}}));
  EXPECT_EQ(r.working_dir, "/work");
  EXPECT_TRUE(r.forward_stdin);
  EXPECT_EQ(r.run_as, "alice");
  EXPECT_TRUE(r.gpu_isolation);

  const RankSpec empty = RankSpecFromProto(hvd::v1::StartRank());
  EXPECT_FALSE(empty.forward_stdin);
  EXPECT_TRUE(empty.argv.empty());
  EXPECT_TRUE(empty.run_as.empty());
  EXPECT_FALSE(empty.gpu_isolation);  // every GPU of the host visible, as under horovodrun
}

TEST(RankSpecProtoTest, RankReportBecomesTheRankEvent) {
  RankReport r;
  r.job_id = "j7";
  r.attempt = 3;
  r.rank = 5;
  r.state = control::RankState::kExited;
  r.pid = 4321;
  r.exit_code = 7;
  r.signal = 0;
  r.error = "why";
  r.stderr_tail = "bye\n";
  r.time_ms = 1234567;
  hvd::v1::RankEvent p;
  ToProto(r, &p);
  EXPECT_EQ(p.job_id(), "j7");
  EXPECT_EQ(p.attempt(), 3);
  EXPECT_EQ(p.rank(), 5);
  EXPECT_EQ(p.state(), hvd::v1::RANK_EXITED);
  EXPECT_EQ(p.pid(), 4321);
  EXPECT_EQ(p.exit_code(), 7);
  EXPECT_EQ(p.error(), "why");
  EXPECT_EQ(p.stderr_tail(), "bye\n");
  EXPECT_EQ(p.time_ms(), 1234567);

  r.state = control::RankState::kKilled;
  r.signal = 9;
  ToProto(r, &p);
  EXPECT_EQ(p.state(), hvd::v1::RANK_KILLED);
  EXPECT_EQ(p.signal(), 9);
}

}  // namespace
}  // namespace hvd::agent
