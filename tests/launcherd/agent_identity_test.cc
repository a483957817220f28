// Issue 20, finding 12: two agents never silently share a host identity. Ranks are grouped by
// host name, so agents in different network namespaces that both defaulted to the machine's
// gethostname() made their ranks try shared memory across namespaces and fail in Init. The
// launcher now refuses a second connected agent with the same name, naming `--host`.
#include <thread>

#include "launcher_test_util.h"
#include "launcherd/agent_registry.h"

namespace hvd::launcherd::testing {
namespace {

class NullLink : public AgentLink {
 public:
  bool SendStartRank(const StartRankCommand&) override { return true; }
  bool SendStopJob(const StopJobCommand&) override { return true; }
  void Close() override {}
};

AgentInfo Info(const std::string& host, const std::string& id = "") {
  AgentInfo info;
  info.id = id;
  info.host = host;
  info.advertise_addr = "10.0.0.1";
  info.slots = 1;
  return info;
}

TEST(AgentIdentity, RegistryRefusesASecondConnectedAgentOfTheSameName) {
  AgentRegistry registry(5000ms);
  auto first_link = std::make_shared<NullLink>();
  std::string first, id;
  ASSERT_TRUE(registry.RegisterUnique(Info("node"), first_link, &first).ok());

  Status s = registry.RegisterUnique(Info("node"), std::make_shared<NullLink>(), &id);
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();
  EXPECT_NE(s.message().find("--host"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(first), std::string::npos) << s.message();
  EXPECT_EQ(registry.List().size(), 1u) << "a refused agent must not be listed";

  // Another name is fine; so is the same agent reconnecting under its id.
  EXPECT_TRUE(registry.RegisterUnique(Info("other"), std::make_shared<NullLink>(), &id).ok());
  std::string again;
  EXPECT_TRUE(
      registry.RegisterUnique(Info("node", first), std::make_shared<NullLink>(), &again).ok());
  EXPECT_EQ(again, first);
}

TEST(AgentIdentity, DisconnectedAgentDoesNotBlockItsRestart) {
  AgentRegistry registry(5000ms);
  auto link = std::make_shared<NullLink>();
  std::string old_id, new_id;
  ASSERT_TRUE(registry.RegisterUnique(Info("node"), link, &old_id).ok());
  registry.Disconnected(old_id, link.get());
  // Restarted without --state-dir: a new id, the same name, the old one still in its lease.
  Status s = registry.RegisterUnique(Info("node"), std::make_shared<NullLink>(), &new_id);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_NE(new_id, old_id);
}

// An agent a restarted launcher expects from a job's record has no heartbeat age until it
// registers (its lease counting from the restart read as a recent heartbeat in /metrics).
TEST(AgentIdentity, AnExpectedAgentHasNoHeartbeatAgeUntilItRegisters) {
  AgentRegistry registry(5000ms);
  AgentInfo expected;
  expected.id = "a-1";
  expected.host = "node";
  registry.Expect({expected});
  EXPECT_EQ(registry.List().size(), 1u);
  EXPECT_TRUE(registry.HeartbeatAges(std::chrono::steady_clock::now()).empty());
  std::string id;
  ASSERT_TRUE(registry.RegisterUnique(Info("node", "a-1"), std::make_shared<NullLink>(), &id).ok());
  EXPECT_EQ(id, "a-1");
  EXPECT_EQ(registry.HeartbeatAges(std::chrono::steady_clock::now()).count("a-1"), 1u);
}

// Over the real AgentGateway stream: the second agent's stream ends with ALREADY_EXISTS and the
// flag to set; after the first one leaves, the name is free again.
TEST(AgentIdentity, GatewayRefusesDuplicateHostWithTheFlagToSet) {
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  auto a = std::make_unique<StreamAgent>(launcher->grpc_address(), "pod-host", 1);
  v1::LauncherMessage m;
  ASSERT_TRUE(a->Next(&m));
  ASSERT_TRUE(m.has_ack()) << m.ShortDebugString();

  StreamAgent b(launcher->grpc_address(), "pod-host", 1);
  EXPECT_FALSE(b.Next(&m, 5s)) << "the duplicate got " << m.ShortDebugString();
  grpc::Status st = b.WaitClosed(5s);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ALREADY_EXISTS) << st.error_message();
  EXPECT_NE(st.error_message().find("--host"), std::string::npos) << st.error_message();

  StreamAgent c(launcher->grpc_address(), "other-host", 1);
  ASSERT_TRUE(c.Next(&m));
  EXPECT_TRUE(m.has_ack()) << m.ShortDebugString();

  a.reset();  // the first agent goes away; its name is free (bounded wait for the launcher to see)
  bool registered = false;
  for (int i = 0; i < 50 && !registered; ++i) {
    StreamAgent d(launcher->grpc_address(), "pod-host", 1);
    registered = d.Next(&m, 5s) && m.has_ack();
    if (!registered) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(registered) << "a new agent named pod-host was still refused";
  launcher->Stop();
}

// An agent that said goodbye is given no more work; its stream's end makes it STOPPED (reported
// once, with its record); it coming back under its id (a --state-dir) is READY again, and an
// agent registering for the host under a new id replaces the STOPPED record.
TEST(AgentIdentity, AStoppingAgentIsNotScheduledAndItsSuccessorReplacesIt) {
  AgentRegistry registry(5000ms);
  auto link = std::make_shared<NullLink>();
  std::string id;
  ASSERT_TRUE(registry.RegisterUnique(Info("node"), link, &id).ok());
  ASSERT_EQ(registry.Schedulable().size(), 1u);
  registry.Stopping(id, link.get(), "hvd-agent on node was stopped");
  EXPECT_TRUE(registry.Schedulable().empty());
  AgentInfo stopped;
  ASSERT_TRUE(registry.Disconnected(id, link.get(), &stopped));
  EXPECT_EQ(stopped.state, "STOPPED");
  EXPECT_EQ(stopped.lost_reason, "hvd-agent on node was stopped");
  EXPECT_FALSE(registry.Disconnected(id, link.get(), &stopped)) << "once";
  EXPECT_TRUE(registry.ExpireLeases(std::chrono::steady_clock::now() + 60s).empty());

  std::string again;
  ASSERT_TRUE(registry.RegisterUnique(Info("node", id), std::make_shared<NullLink>(), &again).ok());
  EXPECT_EQ(again, id);
  ASSERT_EQ(registry.List().size(), 1u);
  EXPECT_EQ(registry.List()[0].state, "READY");

  // Stopped once more, then a successor without --state-dir (a new id): one record, READY.
  auto second = registry.Link(id);
  registry.Stopping(id, second.get(), "");
  ASSERT_TRUE(registry.Disconnected(id, second.get(), &stopped));
  EXPECT_EQ(stopped.lost_reason, "the agent was stopped");
  std::string fresh;
  ASSERT_TRUE(registry.RegisterUnique(Info("node"), std::make_shared<NullLink>(), &fresh).ok());
  EXPECT_NE(fresh, id);
  ASSERT_EQ(registry.List().size(), 1u);
  EXPECT_EQ(registry.List()[0].id, fresh);
}

}  // namespace
}  // namespace hvd::launcherd::testing
