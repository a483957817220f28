// control/spec_limits.h: every field of a job spec and of an agent registration checked against
// one set of limits (hvdrun's and the launcher's), and placement that costs O(ranks), not O(slots),
// whatever an agent claims to have.
#include "control/spec_limits.h"

#include <gtest/gtest.h>

#include <chrono>

#include "control/job_model_proto.h"  // the wire edge: specs and registrations as received
#include "control/placement.h"

namespace hvd::control {
namespace {

v1::JobSpec Spec() {
  v1::JobSpec s;
  s.add_argv("/usr/bin/python3");
  s.add_argv("train.py");
  s.set_np(4);
  (*s.mutable_env())["NCCL_DEBUG"] = "INFO";
  s.set_working_dir("/home/me");
  return s;
}

v1::AgentInfo Agent() {
  v1::AgentInfo a;
  a.set_host("node-b");
  a.set_slots(8);
  a.set_gpus(8);
  a.set_advertise_addr("10.0.0.2");
  a.set_version("0.1.0");
  return a;
}

// The message of the refusal, which must be InvalidArgument.
std::string Refusal(const Status& s) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  return s.message();
}

TEST(SpecLimits, AcceptsAnOrdinarySpec) {
  EXPECT_TRUE(ValidateJobSpec(Spec()).ok());
}

TEST(SpecLimits, CommandLineSizeIsCappedNamingTheLimit) {
  v1::JobSpec s = Spec();
  s.add_argv(std::string(100 << 10, 'a'));
  s.add_argv(std::string(100 << 10, 'b'));
  EXPECT_TRUE(ValidateJobSpec(s).ok());  // 200 KiB in all
  s.add_argv(std::string(100 << 10, 'c'));
  const std::string m = Refusal(ValidateJobSpec(s));
  EXPECT_NE(m.find("command line"), std::string::npos) << m;
  EXPECT_NE(m.find("262144 bytes (256 KiB)"), std::string::npos) << m;

  v1::JobSpec one = Spec();
  one.add_argv(std::string((128 << 10) + 1, 'x'));  // above Linux's MAX_ARG_STRLEN
  EXPECT_NE(Refusal(ValidateJobSpec(one)).find("argument 2"), std::string::npos);
}

TEST(SpecLimits, EnvironmentSizeIsCappedNamingTheLimit) {
  v1::JobSpec s = Spec();
  for (int i = 0; i < 5; ++i) {
    (*s.mutable_env())["BIG" + std::to_string(i)] = std::string(100 << 10, 'v');
  }
  EXPECT_TRUE(ValidateJobSpec(s).ok());  // 500 KiB
  (*s.mutable_env())["BIG5"] = std::string(100 << 10, 'v');
  const std::string m = Refusal(ValidateJobSpec(s));
  EXPECT_NE(m.find("environment"), std::string::npos) << m;
  EXPECT_NE(m.find("524288 bytes (512 KiB)"), std::string::npos) << m;
}

TEST(SpecLimits, RefusesEachBadField) {
  struct Case {
    const char* what;
    void (*edit)(v1::JobSpec*);
    const char* says;
  };
  const Case cases[] = {
      {"no program", [](v1::JobSpec* s) { s->clear_argv(); }, "no program"},
      {"np 0", [](v1::JobSpec* s) { s->set_np(0); }, "np=0"},
      {"np huge", [](v1::JobSpec* s) { s->set_np(2147483647); }, "np=2147483647 is out of range"},
      {"host slots huge",
       [](v1::JobSpec* s) {
         v1::HostSlots* h = s->add_hosts();
         h->set_host("a");
         h->set_slots(2147483647);
       },
       "1..1048576"},
      {"bad host name",
       [](v1::JobSpec* s) {
         v1::HostSlots* h = s->add_hosts();
         h->set_host("a b");
         h->set_slots(4);
       },
       "contains ' '"},
      {"host twice",
       [](v1::JobSpec* s) {
         for (int i = 0; i < 2; ++i) {
           v1::HostSlots* h = s->add_hosts();
           h->set_host("a");
           h->set_slots(2);
         }
       },
       "listed twice"},
      {"hosts too few slots",
       [](v1::JobSpec* s) {
         v1::HostSlots* h = s->add_hosts();
         h->set_host("a");
         h->set_slots(2);
       },
       "gives only 2 slots"},
      {"reserved variable", [](v1::JobSpec* s) { (*s->mutable_env())["HVD_RANK"] = "3"; },
       "HVD_RANK"},
      {"negative timeout", [](v1::JobSpec* s) { s->set_kill_grace_ms(-1); }, "--kill-grace"},
      {"timeout over 30 days", [](v1::JobSpec* s) { s->set_queue_timeout_ms(int64_t{1} << 50); },
       "--queue-timeout"},
      {"restarts", [](v1::JobSpec* s) { s->set_max_restarts(5000); }, "--max-restarts"},
      {"stdin rank", [](v1::JobSpec* s) { s->set_stdin_rank(4); }, "--stdin 4"},
      {"long name", [](v1::JobSpec* s) { s->set_name(std::string(300, 'n')); }, "--name"},
      {"long dir", [](v1::JobSpec* s) { s->set_working_dir(std::string(5000, 'd')); },
       "--working-dir"},
      {"NUL in argv", [](v1::JobSpec* s) { s->add_argv(std::string("a\0b", 3)); }, "NUL"},
  };
  for (const Case& c : cases) {
    v1::JobSpec s = Spec();
    c.edit(&s);
    const Status st = ValidateJobSpec(s);
    ASSERT_FALSE(st.ok()) << c.what;
    EXPECT_NE(Refusal(st).find(c.says), std::string::npos) << c.what << ": " << st.message();
  }
}

TEST(SpecLimits, ElasticNumbersAreChecked) {
  JobSpec fixed;
  fixed.argv = {"/bin/true"};
  fixed.np = 4;
  EXPECT_TRUE(CheckElastic(fixed).ok());  // not elastic: nothing to check
  fixed.reset_limit = 5;                  // ignored without --min-np
  EXPECT_TRUE(CheckElastic(fixed).ok());

  auto spec = [](int min_np, int np, int max_np) {
    JobSpec s;
    s.argv = {"/bin/true"};
    s.np = np;
    s.min_np = min_np;
    s.max_np = max_np;
    return s;
  };
  EXPECT_TRUE(CheckElastic(spec(1, 4, 4)).ok());
  EXPECT_TRUE(CheckElastic(spec(4, 4, 4)).ok());
  EXPECT_TRUE(CheckElastic(spec(2, 4, 8)).ok());  // room to grow as slots appear
  EXPECT_TRUE(ValidateJobSpec(spec(2, 4, 4)).ok());
  struct Case {
    const char* what;
    JobSpec s;
    const char* says;
  };
  JobSpec timeout0 = spec(2, 4, 4);
  timeout0.elastic_timeout_ms = 0;
  JobSpec timeout_long = spec(2, 4, 4);
  timeout_long.elastic_timeout_ms = kMaxJobTimeoutMs + 1;
  JobSpec resets = spec(2, 4, 4);
  resets.reset_limit = -1;
  JobSpec resets_many = spec(2, 4, 4);
  resets_many.reset_limit = 1000001;
  const Case cases[] = {
      {"min above np", spec(5, 4, 4), "got --min-np 5, -np 4, --max-np 4"},
      {"np above max", spec(2, 4, 3), "1 <= --min-np <= -np <= --max-np"},
      {"max without min", spec(0, 4, 4), "got --min-np 0"},
      {"negative min", spec(-1, 4, 4), "--min-np -1"},
      {"max over the rank limit", spec(1, 4, kMaxRanks + 1), "1048576"},
      {"timeout 0", timeout0, "--elastic-timeout"},
      {"timeout over 30 days", timeout_long, "--elastic-timeout"},
      {"negative reset limit", resets, "--reset-limit"},
      {"reset limit huge", resets_many, "--reset-limit"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Status st = CheckElastic(c.s);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(Refusal(st).find(c.says), std::string::npos) << st.message();
    EXPECT_FALSE(ValidateJobSpec(c.s).ok()) << "ValidateJobSpec runs CheckElastic";
  }
  // The same at the wire edge.
  v1::JobSpec p = Spec();
  p.set_min_np(2);
  p.set_max_np(4);
  EXPECT_TRUE(ValidateJobSpec(p).ok());
  p.set_max_np(3);
  EXPECT_NE(Refusal(ValidateJobSpec(p)).find("elastic job"), std::string::npos);
}

TEST(SpecLimits, RegistrationWithHugeSlotCountIsRefused) {
  v1::AgentInfo a = Agent();
  EXPECT_TRUE(ValidateAgentInfo(a).ok());
  a.set_slots(2147483647);
  const std::string m = Refusal(ValidateAgentInfo(a));
  EXPECT_NE(m.find("2147483647 slots"), std::string::npos) << m;
  EXPECT_NE(m.find("1..1048576"), std::string::npos) << m;
  a.set_slots(kMaxSlotsPerHost);  // hvdrun's embedded agent may have np slots
  EXPECT_TRUE(ValidateAgentInfo(a).ok());
}

TEST(SpecLimits, RegistrationFieldsAreChecked) {
  struct Case {
    const char* what;
    void (*edit)(v1::AgentInfo*);
    const char* says;
  };
  const Case cases[] = {
      {"no host", [](v1::AgentInfo* a) { a->clear_host(); }, "--host NAME"},
      {"bad host", [](v1::AgentInfo* a) { a->set_host("node\nb"); }, "--host NAME"},
      {"long host", [](v1::AgentInfo* a) { a->set_host(std::string(300, 'h')); }, "253"},
      {"zero slots", [](v1::AgentInfo* a) { a->set_slots(0); }, "0 slots"},
      {"negative gpus", [](v1::AgentInfo* a) { a->set_gpus(-1); }, "-1 GPUs"},
      {"bad id", [](v1::AgentInfo* a) { a->set_agent_id("x/../y z"); }, "agent id"},
      {"long version", [](v1::AgentInfo* a) { a->set_version(std::string(1000, 'v')); }, "version"},
      {"many interfaces",
       [](v1::AgentInfo* a) {
         for (int i = 0; i < 300; ++i) a->add_interfaces()->set_name("eth" + std::to_string(i));
       },
       "300 interface"},
      {"bad prefix",
       [](v1::AgentInfo* a) {
         v1::NetInterface* i = a->add_interfaces();
         i->set_name("eth0");
         i->set_prefix_len(99);
       },
       "/99"},
  };
  for (const Case& c : cases) {
    v1::AgentInfo a = Agent();
    c.edit(&a);
    const Status st = ValidateAgentInfo(a);
    ASSERT_FALSE(st.ok()) << c.what;
    EXPECT_NE(Refusal(st).find(c.says), std::string::npos) << c.what << ": " << st.message();
  }
}

// An agent with the most slots a registration may claim, and another claiming far more (as a
// buggy or hostile client could hand placement directly): placing a few ranks costs nothing like
// O(slots), and huge totals do not overflow.
TEST(SpecLimits, PlacementIsIndependentOfSlotCounts) {
  std::vector<AgentSlots> agents(3);
  for (int i = 0; i < 3; ++i) {
    agents[i].id = "agent-" + std::to_string(i);
    agents[i].host = "node-" + std::to_string(i);
    agents[i].slots = 2147483647;
    agents[i].order = i;
  }
  agents[0].busy = {0, 1, 5};
  const auto start = std::chrono::steady_clock::now();
  PlacementResult r;
  for (int i = 0; i < 100; ++i) r = Place(agents, {4, {}});
  PlacementResult hosts = Place(agents, {6, {{"node-1", 2147483647}, {"node-2", 3}}});
  PlacementResult wait = Place(agents, {4, {{"node-9", 4}}});
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(ms, 500) << "placement took " << ms << " ms: O(slots)?";
  ASSERT_EQ(r.outcome, PlacementOutcome::kPlaced) << r.reason;
  std::vector<int> slots;
  for (const RankSlot& s : r.ranks) slots.push_back(s.slot);
  EXPECT_EQ(slots, (std::vector<int>{2, 3, 4, 6}));  // the lowest free ones of agent 0
  ASSERT_EQ(hosts.outcome, PlacementOutcome::kPlaced) << hosts.reason;
  EXPECT_EQ(hosts.ranks.size(), 6u);
  EXPECT_EQ(wait.outcome, PlacementOutcome::kWait);
  EXPECT_NE(wait.reason.find("no agent on host node-9"), std::string::npos) << wait.reason;
}

// Local and cross ranks of a large job on many hosts: linear, and as Horovod numbers them.
TEST(SpecLimits, LocalAndCrossRanksScale) {
  std::vector<RankSlot> ranks(200000);
  for (size_t i = 0; i < ranks.size(); ++i) ranks[i].host = "h" + std::to_string(i % 50000);
  const auto start = std::chrono::steady_clock::now();
  ComputeLocalAndCrossRanks(&ranks);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(ms, 2000) << ms << " ms";
  // Rank 50001 is the second rank on host h1: local rank 1 of 4; the second host with a local
  // rank 1 (after h0), of 50000.
  EXPECT_EQ(ranks[50001].local_rank, 1);
  EXPECT_EQ(ranks[50001].local_size, 4);
  EXPECT_EQ(ranks[50001].cross_rank, 1);
  EXPECT_EQ(ranks[50001].cross_size, 50000);
}

}  // namespace
}  // namespace hvd::control
