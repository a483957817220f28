// The NCCL unique-id exchange (runtime/gpu/nccl_bootstrap.h) through the launcher's own
// rendezvous endpoint (KvServer, over the runtime's hvd:// client), as ranks under hvdrun meet:
// the 128-byte binary id crosses the wire intact to every rank, scoped to the job's attempt, and
// the abort key written by one rank wakes the others at once. No CUDA or NCCL: the id is a blob.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/rendezvous_keys.h"
#include "gpu/nccl_bootstrap.h"
#include "launcherd/kv_server.h"
#include "rendezvous/store.h"
#include "tests/launcherd/kv_test_util.h"

namespace hvd::launcherd {
namespace {

using runtime::gpu::AbortNcclExchange;
using runtime::gpu::ExchangeNcclId;
using runtime::gpu::kNcclIdBytes;
using runtime::gpu::NcclIdExchange;
using runtime::rendezvous::NewPrefixStore;
using runtime::rendezvous::OpenStore;
using runtime::rendezvous::Store;
using Clock = std::chrono::steady_clock;

bool Resolve(const std::string& secret, std::string* prefix) {
  if (secret != "secret-nccl") return false;
  *prefix = "job/nccl/";
  return true;
}

class NcclIdOverTheLauncher : public kvtest::EndpointTest {
 protected:
  NcclIdOverTheLauncher() : EndpointTest("secret-nccl", Resolve) {}

  // One rank's exchange over its own connection, in the job's attempt scope as the runtime's.
  Status Rank(const NcclIdExchange& x, const std::string& blob, std::string* id) {
    std::unique_ptr<Store> base;
    HVD_RETURN_IF_ERROR(OpenStore(url_, &base));
    std::unique_ptr<Store> scoped = NewPrefixStore(base::AttemptScope("nccl", 0), base.get());
    auto make = [&](std::string* out) {
      *out = blob;
      return Status::OK();
    };
    return ExchangeNcclId(*scoped, x, make, nullptr, id);
  }
};

NcclIdExchange Exchange(int rank, int size, uint64_t generation, std::chrono::milliseconds t) {
  NcclIdExchange x;
  x.set_id = 0;
  x.generation = generation;
  x.rank = rank;
  x.size = size;
  x.timeout = t;
  return x;
}

TEST_F(NcclIdOverTheLauncher, TheBinaryIdReachesEveryRankIntact) {
  std::string blob(kNcclIdBytes, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>((i * 131 + 7) % 256);
  blob[5] = '\0';
  const int n = 4;
  std::vector<std::string> ids(n);
  std::vector<Status> results(n);
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back(
        [&, r] { results[r] = Rank(Exchange(r, n, 1, std::chrono::seconds(10)), blob, &ids[r]); });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].ToString();
    EXPECT_EQ(ids[r], blob) << "rank " << r << " got a different id";
  }
  // Stored where docs/rendezvous.md says: under the job's attempt.
  std::string value;
  EXPECT_TRUE(store_.Get("job/nccl/attempt/0/" + base::NcclIdKey(0, 1), &value).ok());
  EXPECT_EQ(value, blob);
}

TEST_F(NcclIdOverTheLauncher, AnAbortWakesTheWaitersWithItsReason) {
  // Rank 0 never comes; rank 2 gives the communicator up: ranks 1 and 3 fail at once with its
  // reason, long before their deadline.
  const int n = 4;
  std::vector<Status> results(n);
  std::vector<std::thread> ranks;
  const auto start = Clock::now();
  for (int r : {1, 3}) {
    ranks.emplace_back([&, r] {
      std::string id;
      results[r] = Rank(Exchange(r, n, 2, std::chrono::seconds(30)), "", &id);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::unique_ptr<Store> base;
  ASSERT_TRUE(OpenStore(url_, &base).ok());
  std::unique_ptr<Store> scoped = NewPrefixStore(base::AttemptScope("nccl", 0), base.get());
  ASSERT_TRUE(AbortNcclExchange(*scoped, 0, 2, "rank 2: CUDA out of memory").ok());
  for (auto& t : ranks) t.join();
  const auto waited = Clock::now() - start;
  for (int r : {1, 3}) {
    EXPECT_EQ(results[r].code(), StatusCode::kAborted) << results[r].ToString();
    EXPECT_NE(results[r].message().find("rank 2: CUDA out of memory"), std::string::npos)
        << results[r].ToString();
  }
  EXPECT_LT(waited, std::chrono::seconds(5));
}

}  // namespace
}  // namespace hvd::launcherd
