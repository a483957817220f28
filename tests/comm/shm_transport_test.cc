// The shared-memory transport's own cases, and the job transport that mixes it with TCP. What
// every transport must do (exchanges, dead and silent peers, Abort) is in
// transport_contract_test.cc, shared memory included.
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "rendezvous/store.h"
#include "testutil/exchange.h"
#include "testutil/multiproc.h"
#include "transport/connect.h"
#include "transport/move_off_cpu.h"
#include "transport/shm/shm_transport.h"

namespace hvd::runtime::transport {
namespace {

using hvd::testing::Contains;
using hvd::testing::ExchangeWithAll;
using rendezvous::Store;
using shm::ShmOptions;
using std::chrono::milliseconds;
using TransportPtr = std::unique_ptr<Transport>;

ShmOptions Options(const std::string& scope, milliseconds connect_timeout = milliseconds(20000)) {
  ShmOptions o;
  o.scope = scope;
  o.connect_timeout = connect_timeout;
  return o;
}

TEST(ShmTransportTest, RingSizeMustBeAPowerOfTwo) {
  auto store = rendezvous::NewMemoryStore();
  TransportPtr t;
  ShmOptions o = Options("badring");
  o.ring_bytes = 5000;
  Status s = shm::Connect(*store, 0, 2, o, &t);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "HVD_SHM_RING_BYTES")) << s.message();
}

// Ranks 0-1 on one simulated host, 2-3 on another: shared memory within, TCP between.
TEST(ShmTransportTest, JobTransportMixesShmAndTcp) {
  hvd::testing::RunResult res =
      hvd::testing::RunRanks(4, [](int rank, int size, const std::string& dir) -> Status {
        TransportPtr t;
        const auto hosts = hvd::testing::SplitHosts(size, 2);
        HVD_RETURN_IF_ERROR(hvd::testing::ConnectHosts(rank, size, dir, hosts, true, &t));
        for (int p = 0; p < size; ++p) {
          if (p == rank) continue;
          const bool same = hosts[p] == hosts[rank];
          const std::string want = same ? "(shm segment '" : "(127.0.0.1:";
          if (!Contains(t->link(p)->description(), want)) {
            return Internal("link to rank " + std::to_string(p) + " is " +
                            t->link(p)->description() + ", expected " + want);
          }
        }
        return ExchangeWithAll(*t);
      });
  HVD_EXPECT_RANKS_OK(res);
}

// A rank that spins in WaitReady publishes its CPU, and its peer's link reads it there: the peer
// then yields at once instead of pausing, as the rank it waits for cannot run before it gives the
// CPU up (link_transport.h, "spin"). Rank 0 is pinned to one CPU and waits for rank 1, which
// answers only after it has read rank 0's CPU off its link.
TEST(ShmTransportTest, AWaitingRankPublishesItsCpu) {
  hvd::testing::RunResult res =
      hvd::testing::RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
        std::unique_ptr<Store> store;
        HVD_RETURN_IF_ERROR(rendezvous::NewFileStore(dir, &store));
        TransportPtr t;
        HVD_RETURN_IF_ERROR(shm::Connect(*store, rank, size, Options("cpu"), &t));
        auto* link = static_cast<PollableLink*>(t->link(1 - rank));
        int32_t cpu = 0;
        if (rank == 0) {
          cpu_set_t set;
          if (sched_getaffinity(0, sizeof(set), &set) != 0) return Internal("getaffinity");
          while (cpu < CPU_SETSIZE - 1 && !CPU_ISSET(cpu, &set)) ++cpu;
          CPU_ZERO(&set);
          CPU_SET(cpu, &set);
          if (sched_setaffinity(0, sizeof(set), &set) != 0) return Internal("setaffinity");
          HVD_RETURN_IF_ERROR(Send(*t, 1, &cpu, sizeof(cpu), milliseconds(20000)));
          uint8_t ack = 0;
          return Recv(*t, 1, &ack, 1, milliseconds(20000));  // spins first: publishes `cpu`
        }
        if (link->PeerOnCpu(-1)) return Internal("-1 (no CPU published yet) matched");
        HVD_RETURN_IF_ERROR(Recv(*t, 0, &cpu, sizeof(cpu), milliseconds(20000)));
        // Rank 0 is in its Recv now or soon: wait (bounded) until its CPU shows.
        for (int i = 0; i < 2000 && !link->PeerOnCpu(cpu); ++i) usleep(1000);
        if (!link->PeerOnCpu(cpu)) {
          return Internal("rank 0 waits pinned to CPU " + std::to_string(cpu) +
                          " but its link does not say so");
        }
        if (link->PeerOnCpu(cpu + 1)) return Internal("a CPU rank 0 is not on matched");
        const uint8_t ack = 1;
        return Send(*t, 0, &ack, 1, milliseconds(20000));
      });
  HVD_EXPECT_RANKS_OK(res);
}

// The first two CPUs this process may run on, or false when it may run on fewer.
bool TwoCpus(int* c0, int* c1) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return false;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  if (cpus.size() < 2) return false;
  *c0 = cpus[0];
  *c1 = cpus[1];
  return true;
}

cpu_set_t CpuSet(std::initializer_list<int> cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  return set;
}

// Each case on a thread of its own: the limit of one try per 100 ms is per thread, and the test's
// main thread keeps its affinity.
TEST(MoveOffCpuTest, MovesTheThreadAndLeavesItsAffinityAsItWas) {
  int c0 = -1, c1 = -1;
  if (!TwoCpus(&c0, &c1)) GTEST_SKIP() << "needs two CPUs";
  std::thread([&] {
    const cpu_set_t both = CpuSet({c0, c1}), one = CpuSet({c0});
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    ASSERT_EQ(sched_setaffinity(0, sizeof(both), &both), 0);  // still on c0 now
    ASSERT_EQ(sched_getcpu(), c0);
    EXPECT_FALSE(MoveOffCpu(-1));  // sched_getcpu's failure: not counted as a try
    const long before = MovesOffCpu();
    EXPECT_TRUE(MoveOffCpu(c0));
    EXPECT_EQ(sched_getcpu(), c1);
    EXPECT_EQ(MovesOffCpu(), before + 1);
    cpu_set_t now;
    ASSERT_EQ(sched_getaffinity(0, sizeof(now), &now), 0);
    EXPECT_TRUE(CPU_EQUAL(&now, &both));
    EXPECT_FALSE(MoveOffCpu(c1)) << "a second try within 100 ms";
  }).join();
  std::thread([&] {
    const cpu_set_t one = CpuSet({c0});
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    EXPECT_FALSE(MoveOffCpu(c0)) << "no other CPU allowed";
    EXPECT_EQ(sched_getcpu(), c0);
  }).join();
  std::thread([&] {
    const cpu_set_t one = CpuSet({c1});
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    EXPECT_FALSE(MoveOffCpu(c0)) << "not an allowed CPU";
    EXPECT_EQ(sched_getcpu(), c1);
  }).join();
}

// Two ranks on one CPU while another is allowed, as the scheduler's wake-up placement can leave
// them: the higher rank finds the peer it waits for on its own CPU and moves itself off; the lower
// one never moves. Rank 0 is pinned to c0; rank 1 is put on c0 with c0 and c1 allowed, again each
// attempt (the scheduler may move it first, and then there is nothing to find).
TEST(ShmTransportTest, TheHigherOfTwoRanksSharingACpuMovesOff) {
  int c0 = -1, c1 = -1;
  if (!TwoCpus(&c0, &c1)) GTEST_SKIP() << "needs two CPUs";
  hvd::testing::RunResult res =
      hvd::testing::RunRanks(2, [c0, c1](int rank, int size, const std::string& dir) -> Status {
        std::unique_ptr<Store> store;
        HVD_RETURN_IF_ERROR(rendezvous::NewFileStore(dir, &store));
        TransportPtr t;  // connected with both CPUs allowed: the pause policy (two ranks fit)
        HVD_RETURN_IF_ERROR(shm::Connect(*store, rank, size, Options("move"), &t));
        const cpu_set_t one = CpuSet({c0}), both = CpuSet({c0, c1});
        const int peer = 1 - rank;
        uint8_t moved = 0;
        for (int attempt = 0; attempt < 40 && moved == 0; ++attempt) {
          if (sched_setaffinity(0, sizeof(one), &one) != 0) return Internal("setaffinity");
          if (rank == 1 && sched_setaffinity(0, sizeof(both), &both) != 0) {
            return Internal("setaffinity");
          }
          for (int i = 0; i < 200; ++i) {
            uint8_t out = 1, in = 0;
            HVD_RETURN_IF_ERROR(SendRecv(*t, peer, &out, 1, peer, &in, 1, milliseconds(20000)));
          }
          uint8_t mine = MovesOffCpu() > 0 ? 1 : 0, theirs = 0;
          HVD_RETURN_IF_ERROR(SendRecv(*t, peer, &mine, 1, peer, &theirs, 1, milliseconds(20000)));
          moved = rank == 1 ? mine : theirs;
          if (moved == 0) usleep(110 * 1000);  // past the limit of one try per 100 ms
        }
        if (rank == 0 && MovesOffCpu() != 0) return Internal("the lower rank moved");
        if (rank == 1 && moved == 0) return Internal("rank 1 never moved off rank 0's CPU");
        cpu_set_t now;
        if (sched_getaffinity(0, sizeof(now), &now) != 0) return Internal("getaffinity");
        if (!CPU_EQUAL(&now, rank == 1 ? &both : &one)) return Internal("the affinity changed");
        return Status::OK();
      });
  HVD_EXPECT_RANKS_OK(res);
}

// memfd segments live in no filesystem: a job, even one whose rank was killed, leaves nothing in
// /dev/shm.
TEST(ShmTransportTest, LeavesNothingInDevShm) {
  auto list = [] {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
      names.push_back(e.path().filename());
    }
    return names;
  };
  const auto before = list();
  hvd::testing::RunResult res =
      hvd::testing::RunRanks(3, [](int rank, int size, const std::string& dir) -> Status {
        std::unique_ptr<Store> store;
        HVD_RETURN_IF_ERROR(rendezvous::NewFileStore(dir, &store));
        TransportPtr t;
        HVD_RETURN_IF_ERROR(shm::Connect(*store, rank, size, Options("left"), &t));
        if (rank == 1) raise(SIGKILL);
        HVD_RETURN_IF_ERROR(ExchangeWithAll(*t));  // fails: rank 1 is gone
        return Internal("exchange with a killed rank succeeded");
      });
  ASSERT_EQ(res.ranks.size(), 3u);
  EXPECT_EQ(res.ranks[1].term_signal, SIGKILL);
  EXPECT_EQ(list(), before);
}

}  // namespace
}  // namespace hvd::runtime::transport
