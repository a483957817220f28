// The shared-memory transport's own cases, and the job transport that mixes it with TCP. What
// every transport must do (exchanges, dead and silent peers, Abort) is in
// transport_contract_test.cc, shared memory included.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "gtest/gtest.h"
#include "rendezvous/store.h"
#include "testutil/exchange.h"
#include "testutil/multiproc.h"
#include "transport/connect.h"
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
