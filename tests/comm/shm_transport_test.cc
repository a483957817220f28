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
// CPU up (link_transport.h, "spin"). Nothing is published before a rank's first wait; then rank 0,
// pinned to one CPU, waits for rank 1, which answers only after it has read that CPU off its link.
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
          // No wait on the transport until rank 1 has looked.
          HVD_RETURN_IF_ERROR(store->Wait({"looked"}, milliseconds(20000)));
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
        if (link->PeerCpu() != -1) {
          return Internal("rank 0 has not waited yet, but its link says CPU " +
                          std::to_string(link->PeerCpu()));
        }
        HVD_RETURN_IF_ERROR(store->Set("looked", "1"));
        HVD_RETURN_IF_ERROR(Recv(*t, 0, &cpu, sizeof(cpu), milliseconds(20000)));
        // Rank 0 is in its Recv now or soon: wait (bounded) until its CPU shows.
        for (int i = 0; i < 2000 && link->PeerCpu() != cpu; ++i) usleep(1000);
        if (link->PeerCpu() != cpu) {
          return Internal("rank 0 waits pinned to CPU " + std::to_string(cpu) +
                          " but its link says " + std::to_string(link->PeerCpu()));
        }
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

// Puts the calling thread on `cpu` with `allowed` allowed (it stays there until the scheduler
// moves it): whether it is still on `cpu` after.
bool PlaceOn(int cpu, const cpu_set_t& allowed) {
  const cpu_set_t one = CpuSet({cpu});
  return sched_setaffinity(0, sizeof(one), &one) == 0 &&
         sched_setaffinity(0, sizeof(allowed), &allowed) == 0 && sched_getcpu() == cpu;
}

// Each try on a thread of its own: the limit of one try per 100 ms is per thread, and the test's
// main thread keeps its affinity. A busy machine may move a placed thread first: then try again.
TEST(MoveOffCpuTest, MovesTheThreadAndSetsItsAffinityBack) {
  int c0 = -1, c1 = -1;
  if (!TwoCpus(&c0, &c1)) GTEST_SKIP() << "needs two CPUs";
  const cpu_set_t both = CpuSet({c0, c1}), none = CpuSet({});
  bool moved = false;
  for (int attempt = 0; attempt < 20 && !moved; ++attempt) {
    std::thread([&] {
      if (!PlaceOn(c0, both)) return;
      EXPECT_FALSE(MoveOffCpu(-1, none));  // sched_getcpu's failure: not counted as a try
      const long before = MovesOffCpu();
      const auto start = std::chrono::steady_clock::now();
      moved = MoveOffCpu(c0, none);
      if (!moved) return;  // moved by the scheduler in between
      EXPECT_EQ(MovesOffCpu(), before + 1);
      cpu_set_t now;
      ASSERT_EQ(sched_getaffinity(0, sizeof(now), &now), 0);
      EXPECT_TRUE(CPU_EQUAL(&now, &both));
      const bool again = PlaceOn(c0, both) && MoveOffCpu(c0, none);
      if (std::chrono::steady_clock::now() - start < milliseconds(100)) {
        EXPECT_FALSE(again) << "a second try within 100 ms";
      }
    }).join();
  }
  EXPECT_TRUE(moved);
  std::thread([&] {
    if (!PlaceOn(c0, both)) return;
    EXPECT_FALSE(MoveOffCpu(c0, CpuSet({c1}))) << "the only other CPU is taken";
  }).join();
  std::thread([&] {
    if (!PlaceOn(c0, CpuSet({c0}))) return;
    EXPECT_FALSE(MoveOffCpu(c0, none)) << "no other CPU allowed";
    EXPECT_EQ(sched_getcpu(), c0);
  }).join();
  std::thread([&] {
    if (!PlaceOn(c1, CpuSet({c1}))) return;
    EXPECT_FALSE(MoveOffCpu(c0, none)) << "not on that CPU";
  }).join();
}

// Two ranks on one CPU while both may run on two, as the scheduler's wake-up placement can leave
// them: the higher rank finds the peer it waits for on its own CPU and moves itself off; the lower
// one never moves. Both are put on c0 again each attempt (the scheduler may separate them first,
// and then there is nothing to find).
TEST(ShmTransportTest, TheHigherOfTwoRanksSharingACpuMovesOff) {
  int c0 = -1, c1 = -1;
  if (!TwoCpus(&c0, &c1)) GTEST_SKIP() << "needs two CPUs";
  hvd::testing::RunResult res =
      hvd::testing::RunRanks(2, [c0, c1](int rank, int size, const std::string& dir) -> Status {
        std::unique_ptr<Store> store;
        HVD_RETURN_IF_ERROR(rendezvous::NewFileStore(dir, &store));
        TransportPtr t;  // connected with both CPUs allowed: the pause policy (two ranks fit)
        HVD_RETURN_IF_ERROR(shm::Connect(*store, rank, size, Options("move"), &t));
        const cpu_set_t both = CpuSet({c0, c1});
        const long before = MovesOffCpu();  // a forked rank inherits the parent's count
        const int peer = 1 - rank;
        uint8_t moved = 0;
        for (int attempt = 0; attempt < 40 && moved == 0; ++attempt) {
          PlaceOn(c0, both);
          for (int i = 0; i < 200; ++i) {
            uint8_t out = 1, in = 0;
            HVD_RETURN_IF_ERROR(SendRecv(*t, peer, &out, 1, peer, &in, 1, milliseconds(20000)));
          }
          uint8_t mine = MovesOffCpu() > before ? 1 : 0, theirs = 0;
          HVD_RETURN_IF_ERROR(SendRecv(*t, peer, &mine, 1, peer, &theirs, 1, milliseconds(20000)));
          if (rank == 0 && mine != 0) return Internal("the lower rank moved");
          moved = rank == 1 ? mine : theirs;
          if (moved == 0) usleep(110 * 1000);  // past the limit of one try per 100 ms
        }
        if (moved == 0) return Internal("rank 1 never moved off rank 0's CPU");
        cpu_set_t now;
        if (sched_getaffinity(0, sizeof(now), &now) != 0) return Internal("getaffinity");
        if (!CPU_EQUAL(&now, &both)) return Internal("the affinity is not as it was set");
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
