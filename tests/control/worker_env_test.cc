#include "control/worker_env.h"

#include <gtest/gtest.h>

namespace hvd::control {
namespace {

WorkerEnvInput Input() {
  WorkerEnvInput in;
  in.placement.rank = 5;
  in.placement.local_rank = 1;
  in.placement.local_size = 2;
  in.placement.cross_rank = 2;
  in.placement.cross_size = 4;
  in.placement.host = "node-c";
  in.placement.agent_id = "agent-3";
  in.placement.slot = 1;
  in.size = 8;
  in.rendezvous_address = "10.0.0.5:7071";
  in.job_id = "4f2a";
  in.attempt = 0;
  in.job_secret = "s3cret";
  in.advertise_addr = "10.0.0.3";
  return in;
}

TEST(WorkerEnvTest, RankVariablesInBothNames) {
  auto env = WorkerEnv(Input());
  for (const char* prefix : {"HVD_", "HOROVOD_"}) {
    SCOPED_TRACE(prefix);
    const std::string p = prefix;
    EXPECT_EQ(env[p + "RANK"], "5");
    EXPECT_EQ(env[p + "SIZE"], "8");
    EXPECT_EQ(env[p + "LOCAL_RANK"], "1");
    EXPECT_EQ(env[p + "LOCAL_SIZE"], "2");
    EXPECT_EQ(env[p + "CROSS_RANK"], "2");
    EXPECT_EQ(env[p + "CROSS_SIZE"], "4");
  }
}

TEST(WorkerEnvTest, RendezvousAndIdentity) {
  auto env = WorkerEnv(Input());
  EXPECT_EQ(env["HVD_RENDEZVOUS"], "hvd://10.0.0.5:7071");
  EXPECT_EQ(env["HVD_JOB_ID"], "4f2a");
  EXPECT_EQ(env["HVD_ATTEMPT"], "0");
  EXPECT_EQ(env["HVD_JOB_SECRET"], "s3cret");
  EXPECT_EQ(env["HVD_HOSTNAME"], "node-c");
  EXPECT_EQ(env["HOROVOD_HOSTNAME"], "node-c");
  EXPECT_EQ(env["HVD_ADVERTISE_ADDR"], "10.0.0.3");
  EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);  // the agent's to set
}

TEST(WorkerEnvTest, TlsRendezvousIsHvds) {
  WorkerEnvInput in = Input();
  in.rendezvous_tls = true;
  auto env = WorkerEnv(in);
  EXPECT_EQ(env["HVD_RENDEZVOUS"], "hvds://10.0.0.5:7071");
  EXPECT_EQ(env.count("HVD_RENDEZVOUS_CA"), 0u);  // the agent adds its own CA
}

TEST(WorkerEnvTest, NoAdvertiseAddressLeavesItUnset) {
  WorkerEnvInput in = Input();
  in.advertise_addr.clear();
  auto env = WorkerEnv(in);
  // Unset lets the runtime pick 127.0.0.1 for a single-host job instead of an empty address.
  EXPECT_EQ(env.count("HVD_ADVERTISE_ADDR"), 0u);
}

TEST(WorkerEnvTest, ChosenInterfaceForHvdAndNccl) {
  WorkerEnvInput in = Input();
  auto env = WorkerEnv(in);
  EXPECT_EQ(env.count("HVD_IFACE"), 0u);  // nothing chosen: nothing said
  EXPECT_EQ(env.count("NCCL_SOCKET_IFNAME"), 0u);
  in.iface = "eth1";
  env = WorkerEnv(in);
  EXPECT_EQ(env["HVD_IFACE"], "eth1");
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "=eth1");  // exact: not eth10
  in.job_env = {{"NCCL_SOCKET_IFNAME", "ib"}};    // -x still wins
  EXPECT_EQ(WorkerEnv(in)["NCCL_SOCKET_IFNAME"], "ib");
}

TEST(WorkerEnvTest, JobVariablesOnTop) {
  WorkerEnvInput in = Input();
  in.job_env = {{"NCCL_DEBUG", "INFO"}, {"HVD_LOG_LEVEL", "debug"}, {"HVD_HOSTNAME", "alias"}};
  auto env = WorkerEnv(in);
  EXPECT_EQ(env["NCCL_DEBUG"], "INFO");
  EXPECT_EQ(env["HVD_LOG_LEVEL"], "debug");
  EXPECT_EQ(env["HVD_HOSTNAME"], "alias");
  EXPECT_EQ(env["HVD_RANK"], "5");
}

TEST(WorkerEnvTest, TorchrunVariables) {
  WorkerEnvInput in = Input();
  in.attempt = 2;
  in.max_restarts = 3;
  in.group_rank = 2;
  in.group_world_size = 4;
  in.master_addr = "10.0.0.1";
  in.master_port = 29411;
  auto env = WorkerEnv(in);
  EXPECT_EQ(env["RANK"], "5");
  EXPECT_EQ(env["WORLD_SIZE"], "8");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(env["GROUP_RANK"], "2");
  EXPECT_EQ(env["GROUP_WORLD_SIZE"], "4");
  EXPECT_EQ(env["ROLE_RANK"], "5");
  EXPECT_EQ(env["ROLE_WORLD_SIZE"], "8");
  EXPECT_EQ(env["ROLE_NAME"], "default");
  EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["MASTER_PORT"], "29411");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "3");
  EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "4f2a");
  // torch's env:// then makes rank 0 host the store instead of waiting for an agent's.
  EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "False");
  EXPECT_EQ(env.count("OMP_NUM_THREADS"), 0u);  // left to the program (worker_env.h)
}

TEST(WorkerEnvTest, NoMasterChosenLeavesItUnset) {
  auto env = WorkerEnv(Input());
  EXPECT_EQ(env.count("MASTER_ADDR"), 0u);
  EXPECT_EQ(env.count("MASTER_PORT"), 0u);
}

TEST(WorkerEnvTest, JobsOwnMasterAndDefaultsWin) {
  WorkerEnvInput in = Input();
  in.master_addr = "127.0.0.1";
  in.master_port = 29411;
  auto env = WorkerEnv(in);
  EXPECT_EQ(env["PYTHONUNBUFFERED"], "1");
  EXPECT_EQ(env["NCCL_ASYNC_ERROR_HANDLING"], "1");
  in.job_env = {{"MASTER_ADDR", "store.example"},
                {"MASTER_PORT", "1234"},
                {"PYTHONUNBUFFERED", ""},
                {"NCCL_ASYNC_ERROR_HANDLING", "0"}};
  env = WorkerEnv(in);
  EXPECT_EQ(env["MASTER_ADDR"], "store.example");
  EXPECT_EQ(env["MASTER_PORT"], "1234");
  EXPECT_EQ(env["PYTHONUNBUFFERED"], "");  // Python reads empty as unset: the user's choice
  EXPECT_EQ(env["NCCL_ASYNC_ERROR_HANDLING"], "0");
}

TEST(WorkerEnvTest, GlooFollowsTheChosenInterface) {
  WorkerEnvInput in = Input();
  EXPECT_EQ(WorkerEnv(in).count("GLOO_SOCKET_IFNAME"), 0u);
  in.iface = "eth1";
  EXPECT_EQ(WorkerEnv(in)["GLOO_SOCKET_IFNAME"], "eth1");
}

TEST(WorkerEnvTest, NodeGroupsNumberHostsByFirstRank) {
  std::vector<RankSlot> ranks(5);
  const char* hosts[] = {"b", "b", "a", "a", "c"};
  for (int i = 0; i < 5; ++i) ranks[i].host = hosts[i];
  int groups = 0;
  EXPECT_EQ(NodeGroups(ranks, &groups), (std::vector<int>{0, 0, 1, 1, 2}));
  EXPECT_EQ(groups, 3);
  ranks[4].host = "b";  // not contiguous: still b's group
  EXPECT_EQ(NodeGroups(ranks, &groups), (std::vector<int>{0, 0, 1, 1, 0}));
  EXPECT_EQ(groups, 2);
  EXPECT_TRUE(NodeGroups({}, &groups).empty());
  EXPECT_EQ(groups, 0);
}

TEST(WorkerEnvTest, ValidateRefusesIdentityVariables) {
  EXPECT_TRUE(ValidateJobEnv({{"FOO", "1"}, {"HVD_LOG_LEVEL", "info"}}).ok());
  for (const char* name : {"HVD_RANK",
                           "HOROVOD_SIZE",
                           "HVD_JOB_SECRET",
                           "HVD_RENDEZVOUS",
                           "HVD_JOB_ID",
                           "HVD_ATTEMPT",
                           "HOROVOD_CROSS_RANK",
                           "RANK",
                           "WORLD_SIZE",
                           "LOCAL_RANK",
                           "LOCAL_WORLD_SIZE",
                           "GROUP_RANK",
                           "GROUP_WORLD_SIZE",
                           "ROLE_RANK",
                           "ROLE_WORLD_SIZE",
                           "TORCHELASTIC_RUN_ID",
                           "TORCHELASTIC_RESTART_COUNT",
                           "HVD_RENDEZVOUS_CA",
                           "HVD_RENDEZVOUS_CRL",
                           "HVD_JOB_SECRET_FD",
                           "HVD_JOB_SECRET_FILE"}) {  // (-x HVD_JOB_SECRET_FD=abc was dropped)
    Status s = ValidateJobEnv({{name, "1"}});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("remove it"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(IsLauncherVariable("WORLD_SIZE"));
  EXPECT_FALSE(IsLauncherVariable("MASTER_PORT"));  // a job may bring its own store
  EXPECT_TRUE(ValidateJobEnv({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}).ok());
  EXPECT_EQ(ValidateJobEnv({{"", "x"}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateJobEnv({{"A=B", "x"}}).code(), StatusCode::kInvalidArgument);
}

TEST(WorkerEnvTest, ElasticWorkersGetTheirIdAndTheJobsElasticSettings) {
  WorkerEnvInput in = Input();
  auto fixed = WorkerEnv(in);
  for (const char* name : {"HVD_ELASTIC", "HOROVOD_ELASTIC", "HVD_WORKER_ID",
                           "HVD_ELASTIC_TIMEOUT_SECONDS", "HVD_ELASTIC_RESET_LIMIT"}) {
    EXPECT_EQ(fixed.count(name), 0u) << name << " in a fixed job's worker";
  }
  in.elastic = true;
  in.elastic_timeout_ms = 1500;
  in.reset_limit = 3;
  auto env = WorkerEnv(in);
  EXPECT_EQ(env["HVD_ELASTIC"], "1");
  EXPECT_EQ(env["HOROVOD_ELASTIC"], "1");
  EXPECT_EQ(env["HVD_WORKER_ID"], "5");  // its rank in generation 0, its id for good
  EXPECT_EQ(env["HVD_RANK"], "5");
  // 10 s past the launcher's, whose failure names what was lost.
  EXPECT_DOUBLE_EQ(std::stod(env.at("HVD_ELASTIC_TIMEOUT_SECONDS")), 11);
  EXPECT_EQ(env["HVD_ELASTIC_RESET_LIMIT"], "3");
  // The job's -x cannot pose as the launcher's.
  for (const char* name : {"HVD_WORKER_ID", "HVD_ELASTIC", "HOROVOD_ELASTIC",
                           "HVD_ELASTIC_TIMEOUT_SECONDS", "HVD_ELASTIC_RESET_LIMIT"}) {
    Status s = ValidateJobEnv({{name, "0"}});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace hvd::control
