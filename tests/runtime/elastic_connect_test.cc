// An elastic hvd::Init() whose meeting formed but whose connections then failed (a member hung or
// died between the two) meets its members again instead of failing: hvd.elastic.run re-raises
// Init's errors, so failing ended a healthy worker and, with it, the job (runtime/core/context.cc,
// Context::Create). Real processes over a file store; rank 2 of the harness plays the launcher
// and a member that arrives at the meeting and then never connects.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/rendezvous_keys.h"
#include "rendezvous/store.h"
#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using testing::RunOptions;
using testing::RunRanks;

TEST(ElasticConnect, AMemberThatMetButNeverConnectsIsLeftForTheNextGeneration) {
  RunOptions opts;
  opts.timeout = std::chrono::milliseconds(60000);
  auto res = RunRanks(
      3,
      [](int rank, int, const std::string& dir) -> Status {
        if (rank == 2) {  // the launcher, and worker 2 hung right after its meeting
          std::unique_ptr<runtime::rendezvous::Store> base, attempt;
          HVD_RETURN_IF_ERROR(runtime::rendezvous::OpenStore("file://" + dir, &base));
          attempt = runtime::rendezvous::NewPrefixStore(base::AttemptScope("j", 0), base.get());
          HVD_RETURN_IF_ERROR(attempt->Set(base::ElasticGenerationKey(0), "0,1,2"));
          HVD_RETURN_IF_ERROR(attempt->Set(base::ElasticLatestKey(), "0"));
          // Worker 2 arrives as worker 0 did (same size, host and settings), then never connects.
          const std::string host0 = base::RankKey(base::RankKeyKind::kHost, 0);
          HVD_RETURN_IF_ERROR(attempt->Wait({host0}, std::chrono::milliseconds(30000)));
          std::string value;
          HVD_RETURN_IF_ERROR(attempt->Get(host0, &value));
          HVD_RETURN_IF_ERROR(attempt->Set(base::RankKey(base::RankKeyKind::kHost, 2), value));
          // Past the others' connect timeout (1 s): the launcher removes worker 2.
          std::this_thread::sleep_for(std::chrono::milliseconds(3000));
          HVD_RETURN_IF_ERROR(attempt->Set(base::ElasticGenerationKey(1), "0,1"));
          return attempt->Set(base::ElasticLatestKey(), "1");
        }
        // HVD_RANK and HVD_SIZE, which InitRankWith also sets, are not read by an elastic worker.
        HVD_RETURN_IF_ERROR(testing::InitRankWith(rank, 2, dir, InitOptions{},
                                                  {{"HVD_ELASTIC", "1"},
                                                   {"HVD_WORKER_ID", std::to_string(rank)},
                                                   {"HVD_JOB_ID", "j"},
                                                   {"HVD_ATTEMPT", "0"},
                                                   {"HVD_START_TIMEOUT_SECONDS", "1"},
                                                   {"HVD_ELASTIC_TIMEOUT_SECONDS", "30"}}));
        HVD_RETURN_IF_ERROR(testing::Check(Size() == 2, "size " + std::to_string(Size())));
        std::vector<float> x(16, 1.0f);
        HVD_RETURN_IF_ERROR(Allreduce("x", MakeTensor(x.data(), DataType::kFloat32, 16),
                                      MakeTensor(x.data(), DataType::kFloat32, 16),
                                      testing::Sum()));
        HVD_RETURN_IF_ERROR(testing::ExpectEqual("sum", x, std::vector<float>(16, 2.0f)));
        return Shutdown();
      },
      opts);
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd
