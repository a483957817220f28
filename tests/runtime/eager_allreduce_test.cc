// Data riding with the ready bits: negotiation::AndAllreduce's riders (what arrives from whom,
// where nothing rides, a peer that announces too much) and, through the public API, the eager
// allreduce built on them (HVD_EAGER_ALLREDUCE_MAX_BYTES): when it runs, that its results are
// exact and bit for bit those of the exchange it saves, and when it must not run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "comm/collectives_harness.h"
#include "core/context.h"
#include "negotiation/exchange.h"
#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using runtime::collectives::Comm;
using runtime::collectives::test::Config;
using runtime::collectives::test::Connect;
using runtime::collectives::test::MakeComm;
using runtime::collectives::test::Millis;
using runtime::negotiation::AndAllreduce;
using runtime::negotiation::kMaxRiderBytes;
using runtime::negotiation::Rider;
using runtime::negotiation::Riders;
using runtime::transport::Transport;
using testing::Check;
using testing::InitRank;
using testing::RunRanks;

// Rank r's rider in round `round`: even ranks send (r + 1) x 1000 + round bytes (the last round
// the most a rank accepts), odd ranks nothing.
std::vector<uint8_t> RiderBytes(int rank, int round, int rounds) {
  if (rank % 2 != 0) return {};
  const size_t n =
      round == rounds - 1 ? kMaxRiderBytes : static_cast<size_t>((rank + 1) * 1000 + round);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(rank * 31 + round * 7 + i * 13);
  return v;
}

// Every rank's rider arrives whole at every other, the bits are still ANDed, and the next round
// starts where this one ended (the payload was consumed whether or not it was looked at).
Status ExchangeRiders(const Comm& comm, bool expect_riders) {
  const int n = comm.size(), r = comm.rank();
  const int rounds = 3;
  for (int round = 0; round < rounds; ++round) {
    std::vector<uint64_t> bits = {~(uint64_t{1} << r), 0xF0F0 | (uint64_t{1} << (10 + r))};
    const std::vector<uint8_t> data = RiderBytes(r, round, rounds);
    const Rider mine{data.empty() ? 0u : static_cast<uint32_t>(100 + r),
                     static_cast<uint32_t>(data.size()), data.data()};
    Riders theirs;
    HVD_RETURN_IF_ERROR(AndAllreduce(comm, &bits, &mine, &theirs));
    uint64_t want0 = ~uint64_t{0};
    for (int p = 0; p < n; ++p) want0 &= ~(uint64_t{1} << p);
    HVD_RETURN_IF_ERROR(Check(bits[0] == want0 && bits[1] == (n == 1 ? 0xF0F0 | (1 << 10) : 0xF0F0),
                              "bits not ANDed in round " + std::to_string(round)));
    HVD_RETURN_IF_ERROR(Check(theirs.from.size() == static_cast<size_t>(n), "riders per rank"));
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      const std::vector<uint8_t> want = RiderBytes(p, round, rounds);
      const Rider& got = theirs.from[p];
      const std::string who = "round " + std::to_string(round) + ", rank " + std::to_string(p);
      if (!expect_riders || want.empty()) {
        HVD_RETURN_IF_ERROR(Check(got.tag == 0, who + ": a rider where none was expected"));
        continue;
      }
      HVD_RETURN_IF_ERROR(Check(
          got.tag == static_cast<uint32_t>(100 + p) && got.bytes == want.size() &&
              got.data != nullptr,
          who + ": tag " + std::to_string(got.tag) + ", " + std::to_string(got.bytes) + " bytes"));
      HVD_RETURN_IF_ERROR(Check(got.data == theirs.base + kMaxRiderBytes * p, who + ": placed"));
      HVD_RETURN_IF_ERROR(
          Check(std::memcmp(got.data, want.data(), want.size()) == 0, who + ": bytes differ"));
    }
  }
  return Status::OK();
}

class RidersOn : public ::testing::TestWithParam<Config> {};

TEST_P(RidersOn, EveryRanksDataArrivesWithTheBits) {
  const Config setup = GetParam();
  auto res = RunRanks(setup.ranks, [&](int rank, int, const std::string& dir) -> Status {
    std::unique_ptr<Transport> t;
    HVD_RETURN_IF_ERROR(Connect(setup, rank, dir, &t));
    const Comm comm = MakeComm(setup, t.get(), Millis(30000));
    // Up to kDirectAndMaxRanks every rank sends to every other; above it bits go through rank 0
    // and nothing rides.
    return ExchangeRiders(comm, setup.ranks <= runtime::negotiation::kDirectAndMaxRanks);
  });
  HVD_EXPECT_RANKS_OK(res);
}

INSTANTIATE_TEST_SUITE_P(Setups, RidersOn,
                         ::testing::Values(Config{"tcp", 2, 1, false}, Config{"shm", 3, 1, true},
                                           Config{"shm", 5, 1, true}, Config{"shm", 9, 1, true}),
                         [](const auto& info) {
                           return info.param.name + std::to_string(info.param.ranks);
                         });

// A peer announcing more than a rank accepts fails that rank's exchange, naming the peer.
TEST(Riders, AnOversizedRiderIsAnErrorNamingThePeer) {
  const Config setup{"shm", 2, 1, true};
  auto res = RunRanks(2, [&](int rank, int, const std::string& dir) -> Status {
    std::unique_ptr<Transport> t;
    HVD_RETURN_IF_ERROR(Connect(setup, rank, dir, &t));
    const Comm comm = MakeComm(setup, t.get(), Millis(30000));
    std::vector<uint64_t> bits = {1, 2};
    if (rank == 1) {  // the message of a rank that says kMaxRiderBytes + 1 bytes follow
      const uint64_t header[3] = {1, 2, 5 | uint64_t{kMaxRiderBytes + 1} << 32};
      uint64_t theirs[6];
      return runtime::transport::ExchangeWithAll(*t, header, sizeof header, theirs, Millis(30000));
    }
    Status s = AndAllreduce(comm, &bits);
    const std::string m = s.message();
    return Check(s.code() == StatusCode::kInternal && m.find("rank 1") != std::string::npos &&
                     m.find(std::to_string(kMaxRiderBytes + 1) + " bytes") != std::string::npos &&
                     m.find("a rank accepts 1 to") != std::string::npos,
                 "got " + s.ToString());
  });
  HVD_EXPECT_RANKS_OK(res);
}

// Synchronous allreduces in a loop, as a training step's small tensors or a benchmark: every
// dtype and op, in place and out of place, 1 to 4096 elements. Returns rank 0's results (in
// `file`) and checks every integer result exactly; `*eager` gets the allreduces that ran on data
// that came with the bits, `*hits` those run from the cache.
Status SyncLoop(int rank, int size, const std::string& dir, std::map<std::string, std::string> env,
                const std::string& file, uint64_t* eager, uint64_t* hits) {
  HVD_RETURN_IF_ERROR(InitRank(rank, size, dir, env));
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kProduct};
  std::vector<float> floats;
  for (int rep = 0; rep < 4; ++rep) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{4096}}) {
      for (ReduceOp op : ops) {
        AllreduceOptions o;
        o.op = op;
        const std::string tag = std::to_string(count) + std::string(ReduceOpName(op));
        std::vector<int32_t> in(count), out(count, -7);
        for (size_t k = 0; k < count; ++k) in[k] = (rank + 1) * static_cast<int32_t>(k % 5 + 1);
        HVD_RETURN_IF_ERROR(Allreduce("i." + tag, MakeTensor(in.data(), DataType::kInt32, count),
                                      MakeTensor(out.data(), DataType::kInt32, count), o));
        for (size_t k = 0; k < count; ++k) {
          int64_t want = op == ReduceOp::kProduct ? 1 : 0;
          const int64_t base = static_cast<int64_t>(k % 5 + 1);
          for (int p = 0; p < size; ++p) {
            const int64_t v = (p + 1) * base;
            want = op == ReduceOp::kProduct ? want * v
                   : op == ReduceOp::kMin   ? (p == 0 ? v : std::min(want, v))
                   : op == ReduceOp::kMax   ? std::max(want, v)
                                            : want + v;
          }
          if (op == ReduceOp::kAverage) want = (want * 2 + size) / (2 * size);  // to nearest
          if (out[k] != want) {
            return Internal("i." + tag + "[" + std::to_string(k) + "] = " + std::to_string(out[k]) +
                            ", want " + std::to_string(want));
          }
        }
        // Floats whose sum depends on the order of additions, in place.
        std::vector<float> f(count);
        for (size_t k = 0; k < count; ++k) {
          f[k] = 0.1f * (rank + 1) + 1e-7f * static_cast<float>(k) + 1.0f / (rep + 3);
        }
        HVD_RETURN_IF_ERROR(Allreduce("f." + tag, MakeTensor(f.data(), DataType::kFloat32, count),
                                      MakeTensor(f.data(), DataType::kFloat32, count), o));
        floats.insert(floats.end(), f.begin(), f.end());
      }
    }
  }
  const auto stats = runtime::core::CurrentEngineStats();
  *eager = stats.eager_allreduces;
  *hits = stats.cache_hits;
  HVD_RETURN_IF_ERROR(Shutdown());
  if (rank != 0) return Status::OK();
  FILE* out = std::fopen(file.c_str(), "wb");
  if (out == nullptr) return Internal("cannot write " + file);
  std::fwrite(floats.data(), sizeof(float), floats.size(), out);
  std::fclose(out);
  return Status::OK();
}

struct LoopRun {
  std::vector<char> rank0_floats;
  bool ok = false;
};

// Runs SyncLoop on `size` ranks; `check(eager, hits)` judges every rank's counters.
LoopRun RunLoop(int size, const std::map<std::string, std::string>& env,
                const std::function<Status(uint64_t, uint64_t)>& check) {
  const std::string file = ::testing::TempDir() + "/hvd_eager_" + std::to_string(getpid());
  auto res = RunRanks(size, [&](int rank, int n, const std::string& dir) -> Status {
    uint64_t eager = 0, hits = 0;
    HVD_RETURN_IF_ERROR(SyncLoop(rank, n, dir, env, file, &eager, &hits));
    return check(eager, hits);
  });
  EXPECT_TRUE(res.ok()) << res.FailureMessage();
  LoopRun run;
  run.ok = res.ok();
  if (FILE* f = std::fopen(file.c_str(), "rb")) {
    char buf[4096];
    for (size_t k; (k = std::fread(buf, 1, sizeof buf, f)) > 0;) {
      run.rank0_floats.insert(run.rank0_floats.end(), buf, buf + k);
    }
    std::fclose(f);
    std::remove(file.c_str());
  }
  return run;
}

class EagerAllreduce : public ::testing::TestWithParam<std::pair<int, bool>> {};

// By default a synchronous loop's cached allreduces run on the data that came with the bits
// (every one of them: each is alone in its rounds), with exactly the results of the exchange
// they save; with HVD_EAGER_ALLREDUCE_MAX_BYTES=0 none does.
TEST_P(EagerAllreduce, RunsOnTheDataThatRodeWithTheSameResults) {
  const auto [size, shm] = GetParam();
  const std::map<std::string, std::string> env = {{"HVD_SHM", shm ? "1" : "0"}};
  LoopRun on = RunLoop(size, env, [](uint64_t eager, uint64_t hits) {
    // The first operation of each of the 30 names is negotiated; every later one is a hit, and
    // runs eagerly unless a peer came in a cycle where it did not ride (RiderOf's backoff: only
    // after a wait of 3 cycles or more, which a loaded machine may cause now and then).
    return Check(hits >= 90 && eager * 4 >= hits * 3 && eager <= hits,
                 "eager " + std::to_string(eager) + " of " + std::to_string(hits) + " cache hits");
  });
  auto off_env = env;
  off_env["HVD_EAGER_ALLREDUCE_MAX_BYTES"] = "0";
  LoopRun off = RunLoop(size, off_env, [](uint64_t eager, uint64_t) {
    return Check(eager == 0, std::to_string(eager) + " eager allreduces with the setting 0");
  });
  ASSERT_TRUE(on.ok && off.ok);
  ASSERT_FALSE(on.rank0_floats.empty());
  EXPECT_TRUE(on.rank0_floats == off.rank0_floats) << "eager and exchanged results differ";
}

INSTANTIATE_TEST_SUITE_P(Ranks, EagerAllreduce,
                         ::testing::Values(std::make_pair(2, true), std::make_pair(3, true),
                                           std::make_pair(2, false)),
                         [](const auto& info) {
                           return std::to_string(info.param.first) +
                                  (info.param.second ? "shm" : "tcp");
                         });

// Operations pending in different orders: rank 1 has "y" pending when both run the cached "x",
// so only rank 0 sends x's data; "x" is the one hit of that cycle on both. Every rank must then
// take x's own exchange (a rank running on the riders alone would wait for data never sent).
TEST(EagerAllreduceMixed, ARankThatCannotRideMakesEveryRankExchange) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir, {{"HVD_PEER_TIMEOUT_SECONDS", "10"}}));
    std::vector<float> x(4), y(4);
    for (int i = 0; i < 20; ++i) {
      std::fill(x.begin(), x.end(), 1.0f + rank);
      std::fill(y.begin(), y.end(), 10.0f + rank);
      const Tensor tx = MakeTensor(x.data(), DataType::kFloat32, 4);
      const Tensor ty = MakeTensor(y.data(), DataType::kFloat32, 4);
      if (rank == 1) {
        Handle hy = AllreduceAsync("y", ty, ty, testing::Sum());
        HVD_RETURN_IF_ERROR(Allreduce("x", tx, tx, testing::Sum()));
        HVD_RETURN_IF_ERROR(hy.Wait());
      } else {
        HVD_RETURN_IF_ERROR(Allreduce("x", tx, tx, testing::Sum()));
        HVD_RETURN_IF_ERROR(Allreduce("y", ty, ty, testing::Sum()));
      }
      HVD_RETURN_IF_ERROR(
          Check(x[0] == 3.0f && y[3] == 21.0f, "wrong sums in step " + std::to_string(i)));
    }
    const uint64_t hits = runtime::core::CurrentEngineStats().cache_hits;
    HVD_RETURN_IF_ERROR(Shutdown());
    return Check(hits >= 30, "only " + std::to_string(hits) + " cache hits");
  });
  HVD_EXPECT_RANKS_OK(res);
}

// Above the setting, and with a prescale (the bytes sent would not be the bytes reduced), the
// operation takes its own exchange.
TEST(EagerAllreduceOff, AboveTheLimitAndWithAPrescale) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir, {{"HVD_EAGER_ALLREDUCE_MAX_BYTES", "16"}}));
    std::vector<float> big(5, 1.0f), small(4, 1.0f);
    for (int i = 0; i < 10; ++i) {
      std::fill(big.begin(), big.end(), 1.0f);
      HVD_RETURN_IF_ERROR(Allreduce("big", MakeTensor(big.data(), DataType::kFloat32, 5),
                                    MakeTensor(big.data(), DataType::kFloat32, 5), testing::Sum()));
      AllreduceOptions o = testing::Sum();
      o.prescale = 3.0;
      std::fill(small.begin(), small.end(), 1.0f);
      HVD_RETURN_IF_ERROR(Allreduce("scaled", MakeTensor(small.data(), DataType::kFloat32, 4),
                                    MakeTensor(small.data(), DataType::kFloat32, 4), o));
      HVD_RETURN_IF_ERROR(Check(big[0] == 2.0f && small[3] == 6.0f, "wrong sums"));
    }
    const uint64_t eager = runtime::core::CurrentEngineStats().eager_allreduces;
    HVD_RETURN_IF_ERROR(Shutdown());
    return Check(eager == 0, std::to_string(eager) + " eager allreduces");
  });
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd
