// CPU binding plans over fake topologies: more ranks than cores, two sockets with hyperthreads, a
// restricted allowed set (a cpuset), explicit lists; parsing of the flags and of --binding-args;
// and the topology reader over a fake /sys tree.
#include "control/cpu_binding.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "testutil/expect.h"

namespace hvd::control {
namespace {

#define ASSERT_OK(expr)                                    \
  do {                                                     \
    const Status _s = (expr);                              \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s.message(); \
  } while (0)

// `sockets` x `cores` x `threads`, numbered as Linux does on x86: the first hardware thread of
// every core first, then the second ones (cpu = thread * total_cores + core index).
std::vector<CpuInfo> Topology(int sockets, int cores, int threads) {
  std::vector<CpuInfo> out;
  const int total = sockets * cores;
  for (int t = 0; t < threads; ++t) {
    for (int s = 0; s < sockets; ++s) {
      for (int c = 0; c < cores; ++c) out.push_back({t * total + s * cores + c, c, s});
    }
  }
  return out;
}

std::vector<int> Plan(const BindingPolicy& p, const std::vector<CpuInfo>& topo,
                      const std::vector<int>& allowed, int local_rank, int local_size,
                      std::string* note = nullptr) {
  BindingPlan plan;
  Status s = PlanBinding(p, topo, allowed, local_rank, local_size, &plan);
  EXPECT_TRUE(s.ok()) << s.message();
  if (note != nullptr) *note = plan.note;
  return plan.cpus;
}

BindingPolicy Bind(BindTo b) {
  BindingPolicy p;
  p.bind_to = b;
  return p;
}

TEST(CpuBinding, NoneBindsNothing) {
  EXPECT_TRUE(Plan(BindingPolicy(), Topology(1, 4, 1), {}, 0, 2).empty());
}

TEST(CpuBinding, CoreGivesEachRankAnEqualBlockOfWholeCores) {
  const auto topo = Topology(1, 4, 2);  // cores 0-3, their second threads 4-7
  EXPECT_EQ(Plan(Bind(BindTo::kCore), topo, {}, 0, 2), (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(Plan(Bind(BindTo::kCore), topo, {}, 1, 2), (std::vector<int>{2, 3, 6, 7}));
  // 3 ranks on 4 cores: one core each, the fourth unused.
  EXPECT_EQ(Plan(Bind(BindTo::kCore), topo, {}, 2, 3), (std::vector<int>{2, 6}));
}

TEST(CpuBinding, MoreRanksThanCoresWrapsAroundAndSaysSoOnce) {
  const auto topo = Topology(1, 2, 1);  // this machine: 2 cores
  std::string note;
  EXPECT_EQ(Plan(Bind(BindTo::kCore), topo, {}, 0, 4, &note), (std::vector<int>{0}));
  EXPECT_HAS(note, "4 ranks on this host share 2 cores");
  EXPECT_EQ(Plan(Bind(BindTo::kCore), topo, {}, 1, 4, &note), (std::vector<int>{1}));
  EXPECT_EQ(note, "");  // said once, by local rank 0
  EXPECT_EQ(Plan(Bind(BindTo::kCore), topo, {}, 2, 4), (std::vector<int>{0}));
  EXPECT_EQ(Plan(Bind(BindTo::kCore), topo, {}, 3, 4), (std::vector<int>{1}));
}

TEST(CpuBinding, SocketRoundRobinOverTwoSockets) {
  const auto topo = Topology(2, 2, 2);  // socket 0: 0,1,4,5; socket 1: 2,3,6,7
  EXPECT_EQ(Plan(Bind(BindTo::kSocket), topo, {}, 0, 3), (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(Plan(Bind(BindTo::kSocket), topo, {}, 1, 3), (std::vector<int>{2, 3, 6, 7}));
  EXPECT_EQ(Plan(Bind(BindTo::kSocket), topo, {}, 2, 3), (std::vector<int>{0, 1, 4, 5}));
}

TEST(CpuBinding, RestrictedAllowedSetIsRespected) {
  const auto topo = Topology(2, 4, 1);            // socket 0: 0-3, socket 1: 4-7
  const std::vector<int> allowed = {2, 3, 4, 5};  // a cpuset straddling both sockets
  EXPECT_EQ(Plan(Bind(BindTo::kCore), topo, allowed, 0, 2), (std::vector<int>{2, 3}));
  EXPECT_EQ(Plan(Bind(BindTo::kCore), topo, allowed, 1, 2), (std::vector<int>{4, 5}));
  EXPECT_EQ(Plan(Bind(BindTo::kSocket), topo, allowed, 0, 2), (std::vector<int>{2, 3}));
  EXPECT_EQ(Plan(Bind(BindTo::kSocket), topo, allowed, 1, 2), (std::vector<int>{4, 5}));
  // Only socket 1 allowed: every rank lands there.
  EXPECT_EQ(Plan(Bind(BindTo::kSocket), topo, {6, 7}, 1, 2), (std::vector<int>{6, 7}));
}

TEST(CpuBinding, ExplicitListsPerLocalRank) {
  BindingPolicy p;
  ASSERT_OK(PolicyFromValues("", "0-1;2,3", &p));
  const auto topo = Topology(1, 4, 1);
  EXPECT_EQ(Plan(p, topo, {}, 0, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(Plan(p, topo, {}, 1, 2), (std::vector<int>{2, 3}));

  BindingPlan plan;
  Status s = PlanBinding(p, topo, {}, 2, 3, &plan);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_HAS(s.message(), "--cpu-list has 2 entries but this host runs 3 ranks");
  s = PlanBinding(p, topo, {0, 1}, 1, 2, &plan);  // entry 1 names CPUs the cpuset forbids
  EXPECT_HAS(s.message(), "--cpu-list entry 1 (\"2-3\") names CPU 2");
  EXPECT_HAS(s.message(), "allowed: 0-1");
}

TEST(CpuBinding, ParsingNamesTheBadEntry) {
  std::vector<std::vector<int>> lists;
  ASSERT_OK(ParseCpuList(" 0-3 ; 4,6-7 ", &lists));
  EXPECT_EQ(lists, (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 6, 7}}));
  Status s = ParseCpuList("0-3;4-x", &lists);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(s.message(), "--cpu-list entry 1 (\"4-x\"");
  EXPECT_HAS(ParseCpuList("0;;2", &lists).message(), "entry 1");
  EXPECT_HAS(ParseCpuList("3-1", &lists).message(), "not a CPU range");
  EXPECT_EQ(FormatCpuSet({8, 0, 1, 2, 3, 10, 11}), "0-3,8,10-11");

  BindTo b;
  EXPECT_HAS(ParseBindTo("hwthread", &b).message(), "core, a socket or none");
  BindingPolicy p;
  EXPECT_HAS(PolicyFromValues("core", "0;1", &p).message(), "give one");
}

TEST(CpuBinding, BindingArgsAcceptTheMpirunSubsetAndRefuseTheRest) {
  std::string bind;
  ASSERT_OK(ParseBindingArgs("--bind-to core --map-by slot", &bind));
  EXPECT_EQ(bind, "core");
  ASSERT_OK(ParseBindingArgs("-bind-to socket -map-by core", &bind));
  EXPECT_EQ(bind, "socket");
  ASSERT_OK(ParseBindingArgs("--bind-to=core:overload-allowed", &bind));
  EXPECT_EQ(bind, "core");
  ASSERT_OK(ParseBindingArgs("--map-by slot", &bind));
  EXPECT_EQ(bind, "");
  EXPECT_HAS(ParseBindingArgs("--map-by ppr:2:socket", &bind).message(), "-H host1:N");
  EXPECT_HAS(ParseBindingArgs("--bind-to core --report-bindings", &bind).message(),
             "'--report-bindings' is not a binding option");
  EXPECT_HAS(ParseBindingArgs("--bind-to numa", &bind).message(), "'numa'");
  EXPECT_HAS(ParseBindingArgs("--cpu-set 0,1", &bind).message(), "hvdrun --cpu-list");
  EXPECT_HAS(ParseBindingArgs("--bind-to", &bind).message(), "needs a value");
}

TEST(CpuBinding, ReadsTheTopologyFromSysfs) {
  char tmpl[] = "/tmp/cpu_binding_test.XXXXXX";
  const std::string root = mkdtemp(tmpl);
  for (int cpu : {0, 1, 2, 3}) {
    const std::string dir = root + "/cpu" + std::to_string(cpu);
    mkdir(dir.c_str(), 0755);
    if (cpu == 3) continue;  // no topology: its own core on package 0
    mkdir((dir + "/topology").c_str(), 0755);
    std::ofstream(dir + "/topology/core_id") << cpu % 2 << "\n";
    std::ofstream(dir + "/topology/physical_package_id") << cpu / 2 << "\n";
  }
  mkdir((root + "/cpufreq").c_str(), 0755);  // not a CPU
  std::vector<CpuInfo> cpus;
  ASSERT_OK(ReadCpuTopology(root, &cpus));
  ASSERT_EQ(cpus.size(), 4u);
  EXPECT_EQ(cpus[2].cpu, 2);
  EXPECT_EQ(cpus[2].core, 0);
  EXPECT_EQ(cpus[2].package, 1);
  EXPECT_EQ(cpus[3].core, 3);
  EXPECT_EQ(cpus[3].package, 0);
  (void)!std::system(("rm -rf '" + root + "'").c_str());

  // The real machine: every allowed CPU is in the topology.
  ASSERT_OK(ReadCpuTopology("/sys/devices/system/cpu", &cpus));
  std::vector<int> allowed;
  ASSERT_OK(AllowedCpus(&allowed));
  EXPECT_FALSE(allowed.empty());
  for (int a : allowed) {
    EXPECT_TRUE(std::any_of(cpus.begin(), cpus.end(), [&](const CpuInfo& c) { return c.cpu == a; }))
        << a;
  }
}

}  // namespace
}  // namespace hvd::control
