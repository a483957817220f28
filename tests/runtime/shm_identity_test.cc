// Issue 20, finding 12: a host name is only a claim. Ranks that share HVD_HOSTNAME but not a
// kernel or namespaces (agents in different containers that got the same name) must not try
// shared memory with each other; they fall back to TCP and the job still works.
//
// Creating namespaces needs root, so these tests fake "another namespace" with the test-only
// variable HVD_TEST_SHM_IDENTITY (transport/connect.h: LocalShmIdentity), which replaces the
// identity read from /proc. tests/cluster/ covers real namespaces.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "core/context.h"
#include "rendezvous/store.h"
#include "runtime_env.h"
#include "testutil/multiproc.h"
#include "transport/connect.h"

namespace hvd {
namespace {

using testing::Check;
using testing::Contains;
using testing::RunRanks;

TEST(ShmIdentity, LocalIdentityNamesBootAndNamespaces) {
  unsetenv("HVD_TEST_SHM_IDENTITY");
  const std::string id = runtime::transport::LocalShmIdentity();
  EXPECT_TRUE(Contains(id, "boot=")) << id;
  EXPECT_TRUE(Contains(id, "ipc:[")) << id;
  EXPECT_TRUE(Contains(id, "net:[")) << id;
  setenv("HVD_TEST_SHM_IDENTITY", "pod-a", 1);
  EXPECT_EQ(runtime::transport::LocalShmIdentity(), "test:pod-a");
  unsetenv("HVD_TEST_SHM_IDENTITY");
}

TEST(ShmIdentity, GroupsOnlyEqualIdentities) {
  using runtime::transport::SameIdentity;
  const std::vector<int> same_host = {0, 2, 3, 5};
  const std::vector<std::string> ids = {"a", "b", "a", "b"};
  EXPECT_EQ(SameIdentity(same_host, ids, 0), (std::vector<int>{0, 3}));
  EXPECT_EQ(SameIdentity(same_host, ids, 5), (std::vector<int>{2, 5}));
  EXPECT_EQ(SameIdentity({4}, {"x"}, 4), (std::vector<int>{4}));
}

// Four ranks all named "node", two "pods" of two: shared memory inside a pod, TCP across, and an
// allreduce over the mixed transport gives the exact sum.
TEST(ShmIdentity, SameHostNameDifferentNamespacesFallBackToTcp) {
  auto res = RunRanks(4, [](int rank, int size, const std::string& dir) -> Status {
    setenv("HVD_TEST_SHM_IDENTITY", rank < 2 ? "pod-a" : "pod-b", 1);
    std::unique_ptr<runtime::rendezvous::Store> store;
    HVD_RETURN_IF_ERROR(runtime::rendezvous::NewFileStore(dir, &store));
    const std::vector<std::string> hosts(size, "node");
    std::unique_ptr<runtime::transport::Transport> t;
    runtime::collectives::Comm comm;
    HVD_RETURN_IF_ERROR(runtime::core::ConnectComm(
        *store, rank, size, hosts, std::chrono::milliseconds(20000), nullptr, &t, &comm));
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      const std::string d = t->link(p)->description();
      const bool shm = Contains(d, "shm segment");
      const bool want_shm = (p < 2) == (rank < 2);
      HVD_RETURN_IF_ERROR(Check(shm == want_shm, "rank " + std::to_string(rank) + " to rank " +
                                                     std::to_string(p) + ": link " + d +
                                                     (want_shm ? ", want shm" : ", want TCP")));
    }
    std::vector<int64_t> v(1000, rank + 1);
    HVD_RETURN_IF_ERROR(runtime::collectives::Allreduce(comm, v.data(), v.size(), DataType::kInt64,
                                                        ReduceOp::kSum));
    for (int64_t x : v) HVD_RETURN_IF_ERROR(Check(x == 10, "sum " + std::to_string(x) + " != 10"));
    return Status::OK();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// The same through the public API: HVD_HOSTNAME equal on every rank, identities split 1 + 2.
TEST(ShmIdentity, InitAndAllreduceWorkAcrossFakeNamespaces) {
  auto res = RunRanks(3, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(testing::InitRank(
        rank, size, dir,
        {{"HVD_HOSTNAME", "same-name"}, {"HVD_TEST_SHM_IDENTITY", rank == 0 ? "ns0" : "ns1"}}));
    std::vector<float> v(5000, 1.0f);
    AllreduceOptions o;
    o.op = ReduceOp::kSum;
    HVD_RETURN_IF_ERROR(Allreduce("x", MakeTensor(v.data(), DataType::kFloat32, v.size()),
                                  MakeTensor(v.data(), DataType::kFloat32, v.size()), o));
    for (float x : v) HVD_RETURN_IF_ERROR(Check(x == 3.0f, "sum " + std::to_string(x)));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd
