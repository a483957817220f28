// Multi-process tests of the collectives, one forked process per rank (testutil/multiproc.h),
// parameterised over a grid of setups: rank counts x transports (TCP on 127.0.0.1, shared
// memory, both with ranks on simulated hosts) x algorithm thresholds, so that the ring (chunked
// and not), the direct latency path, the single-copy path and the hierarchical path each run the
// whole grid.
//
// Allreduce covers every count x dtype x op on one mesh per rank count, against the exact
// results of collectives_reference.h. Failures and the harness: collectives_failure_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/reduce.h"
#include "collectives_harness.h"
#include "collectives_reference.h"
#include "testutil/cross_memory.h"
#include "testutil/mix.h"
#include "testutil/multiproc.h"

namespace hvd::runtime::collectives {
namespace {

using hvd::testing::Mix;
using hvd::testing::RunOptions;
using hvd::testing::RunRanks;
using hvd::testing::RunResult;
using test::Compare;
using test::Config;
using test::Connect;
using test::Done;
using test::Expected;
using test::Input;
using test::kAllOps;
using test::kAllTypes;
using test::kCounts;
using test::MakeComm;
using test::Millis;
using test::Reference;
using test::SkipLarge;
using transport::Transport;

std::vector<Config> Grid() {
  constexpr size_t kAlways = ~size_t{0};
  std::vector<Config> grid;
  for (int n : {1, 2, 3, 4, 5, 8}) grid.push_back({"tcp", n});
  for (int n : {2, 3, 4, 5, 8}) grid.push_back({"shm", n, 1, true});
  // The ring alone, in many small chunks, and the direct path alone, at every size.
  for (int n : {2, 3, 5}) grid.push_back({"shm_ring", n, 1, true, 0, 4096});
  for (int n : {2, 3, 5}) grid.push_back({"shm_direct", n, 1, true, kAlways});
  // The single-copy allreduce at every size, in pieces of 16 KiB (4 chunks).
  for (int n : {2, 3, 5}) grid.push_back({"shm_single", n, 1, true, 0, 4096, 1});
  // Results written around the cache (stream_copy.h) wherever the ring and the single copy may.
  for (int n : {2, 3}) grid.push_back({"shm_ring_stream", n, 1, true, 0, 4096, 0, 0, 1});
  for (int n : {2, 3}) grid.push_back({"shm_single_stream", n, 1, true, 0, 4096, 1, 0, 1});
  // Equal hosts: the hierarchical allreduce (both of its paths); unequal: flat over mixed links.
  for (int n : {4, 6}) grid.push_back({"2hosts", n, 2, true});
  grid.push_back({"2hosts_ring", 4, 2, true, 0, 4096});
  grid.push_back({"3hosts_ring", 6, 3, true, 0, 4096});
  grid.push_back({"2hosts_direct", 6, 2, true, kAlways});
  for (int n : {3, 5}) grid.push_back({"2hosts_unequal", n, 2, true});
  // The ring's look-ahead (ring_allreduce.cc), as jobs across hosts run it: flat over mixed
  // links, and the hierarchical allreduce's cross ring of 3 hosts; many chunks.
  grid.push_back({"2hosts_unequal_ahead", 5, 2, true, 0, 4096, 0, 4});
  grid.push_back({"3hosts_ring_ahead", 6, 3, true, 0, 4096, 0, 3});
  return grid;
}

class Collectives : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override {
    if (GetParam().single_copy_min == 0) return;
    const std::string why = hvd::testing::CrossMemoryUnavailable();
    if (!why.empty()) GTEST_SKIP() << why;
  }

  // Runs `body(comm, rank, size, store_dir)` on every rank of the setup over a fresh transport.
  template <typename Body>
  RunResult Run(Body body, RunOptions options = {}) {
    const Config setup = GetParam();
    return RunRanks(
        setup.ranks,
        [&body, &setup](int rank, int size, const std::string& dir) -> Status {
          std::unique_ptr<Transport> t;
          HVD_RETURN_IF_ERROR(Connect(setup, rank, dir, &t));
          Comm comm = MakeComm(setup, t.get(), Millis(30000));
          HVD_RETURN_IF_ERROR(test::EnableSingleCopyAsAsked(setup, &comm));
          return body(comm, rank, size, dir);
        },
        options);
  }
};

// Runs `check(ref, count, dtype, op, what)` for every count x dtype x op in `ops` the grid takes
// (pairs that are defined, sizes SkipLarge allows), `what` naming the case; the first error ends
// it.
template <typename Ops, typename Check>
Status EveryCase(int rank, int size, const char* prefix, const Ops& ops, Check check) {
  for (size_t count : kCounts) {
    const Reference ref(count, rank, size);
    for (DataType t : kAllTypes) {
      for (ReduceOp op : ops) {
        if (!CheckReduceDtype(t, op).ok()) continue;  // bool average
        if (SkipLarge(t, count, size)) continue;
        const std::string what = prefix + std::string("rank ") + std::to_string(rank) + " count " +
                                 std::to_string(count) + " " + std::string(DataTypeName(t)) + " " +
                                 std::string(ReduceOpName(op));
        HVD_RETURN_IF_ERROR(check(ref, count, t, op, what));
      }
    }
  }
  return Status::OK();
}

TEST_P(Collectives, AllreduceEveryCountDtypeOp) {
  RunResult res = Run([](const Comm& comm, int rank, int size, const std::string&) -> Status {
    std::string report;
    int reported = 0;
    HVD_RETURN_IF_ERROR(EveryCase(
        rank, size, "", kAllOps,
        [&](const Reference& ref, size_t count, DataType t, ReduceOp op, const std::string& what) {
          std::vector<char> buf = Input(ref, 0, count, t, op);
          HVD_RETURN_IF_ERROR_CTX(Allreduce(comm, buf.data(), count, t, op), what);
          Compare(what, buf, Expected(ref, 0, count, t, op, size), t, 0, &report, &reported);
          return Status::OK();
        }));
    return Done(report);
  });
  HVD_EXPECT_RANKS_OK(res);
}

// Out of place (AllreduceParts with an input of its own): the ring, the single copy and the
// direct path reduce from the input where it is (ReduceTo), the hierarchical path copies it
// first; either way the output holds exactly what the in-place allreduce gives, whatever it held
// before, and the input is never written. (Operand order, which min and max show on NaNs and
// signed zeros: reduce_test.cc's ReduceTo test.)
TEST_P(Collectives, AllreduceOutOfPlaceEveryCountDtype) {
  RunResult res = Run([](const Comm& comm, int rank, int size, const std::string&) -> Status {
    std::string report;
    int reported = 0;
    constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                 ReduceOp::kMax};
    HVD_RETURN_IF_ERROR(EveryCase(
        rank, size, "out of place, ", kOps,
        [&](const Reference& ref, size_t count, DataType t, ReduceOp op, const std::string& what) {
          const std::vector<char> in = Input(ref, 0, count, t, op);
          std::vector<char> input = in;
          std::vector<char> out(in.size(), static_cast<char>(0x5a));
          HVD_RETURN_IF_ERROR_CTX(
              AllreduceParts(comm, input.data(), out.data(), AllreduceLayout(comm, count), t, op),
              what);
          Compare(what, out, Expected(ref, 0, count, t, op, size), t, 0, &report, &reported);
          if (input != in) return Internal(what + ": the input was written");
          return Status::OK();
        }));
    return Done(report);
  });
  HVD_EXPECT_RANKS_OK(res);
}

// Byte `i` of rank `src`'s contribution (to `dst`, for alltoall).
char Pattern(int src, int dst, size_t i) {
  return static_cast<char>(
      Mix((static_cast<uint64_t>(src) << 40) ^ (static_cast<uint64_t>(dst) << 32) ^ i));
}

TEST_P(Collectives, AllgatherAnySizes) {
  RunResult res = Run([](const Comm& comm, int rank, int size, const std::string&) -> Status {
    const std::vector<std::function<size_t(int)>> patterns = {
        [](int) -> size_t { return 0; },
        [](int r) -> size_t { return r % 3 == 1 ? 0 : 1 + 37 * r; },
        [](int r) -> size_t { return r == 0 ? 0 : 100000 + (r * 300007) % 1000003; },
        [size](int r) -> size_t { return r == size - 1 ? (3 << 20) + 1 : 0; },
    };
    std::string report;
    int reported = 0;
    for (size_t k = 0; k < patterns.size(); ++k) {
      for (bool in_place : {false, true}) {
        std::vector<size_t> bytes(size), off(size + 1, 0);
        for (int r = 0; r < size; ++r) {
          bytes[r] = patterns[k](r);
          off[r + 1] = off[r] + bytes[r];
        }
        std::vector<char> want(off[size]);
        for (int r = 0; r < size; ++r) {
          for (size_t i = 0; i < bytes[r]; ++i) want[off[r] + i] = Pattern(r, 0, i);
        }
        std::vector<char> out(off[size], '\xee');
        std::vector<char> in(want.begin() + off[rank], want.begin() + off[rank + 1]);
        if (in_place) std::memcpy(out.data() + off[rank], in.data(), in.size());
        const void* src = in_place ? out.data() + off[rank] : in.data();
        const std::string what = "rank " + std::to_string(rank) + " allgather pattern " +
                                 std::to_string(k) + (in_place ? " in place" : "");
        HVD_RETURN_IF_ERROR_CTX(Allgather(comm, src, out.data(), bytes), what);
        Compare(what, out, want, DataType::kUInt8, 0, &report, &reported);
      }
    }
    return Done(report);
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  RunResult res = Run([](const Comm& comm, int rank, int size, const std::string&) -> Status {
    // 64 KiB is the tree/chain boundary.
    const size_t sizes[] = {0, 1, 1000, 64 << 10, (64 << 10) + 1, (3 << 20) + 5};
    std::string report;
    int reported = 0;
    for (int root = 0; root < size; ++root) {
      for (size_t n : sizes) {
        std::vector<char> want(n);
        for (size_t i = 0; i < n; ++i) want[i] = Pattern(root, 1, i);
        std::vector<char> buf = rank == root ? want : std::vector<char>(n, '\xee');
        const std::string what = "rank " + std::to_string(rank) + " broadcast root " +
                                 std::to_string(root) + " bytes " + std::to_string(n);
        HVD_RETURN_IF_ERROR_CTX(Broadcast(comm, buf.data(), n, root), what);
        Compare(what, buf, want, DataType::kUInt8, 0, &report, &reported);
      }
    }
    return Done(report);
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST_P(Collectives, AlltoallUnevenSplits) {
  RunResult res = Run([](const Comm& comm, int rank, int size, const std::string&) -> Status {
    // Bytes rank s sends to rank d, including 0s and a self block.
    const std::vector<std::function<size_t(int, int)>> patterns = {
        [](int s, int d) -> size_t { return ((s * 7 + d * 3) % 5) * 1001; },
        [](int s, int d) -> size_t { return ((s + d) % 3) * 200003; },
        [](int, int) -> size_t { return 0; },
    };
    std::string report;
    int reported = 0;
    for (size_t k = 0; k < patterns.size(); ++k) {
      std::vector<size_t> send(size), recv(size);
      for (int p = 0; p < size; ++p) {
        send[p] = patterns[k](rank, p);
        recv[p] = patterns[k](p, rank);
      }
      std::vector<char> in, want;
      for (int p = 0; p < size; ++p) {
        for (size_t i = 0; i < send[p]; ++i) in.push_back(Pattern(rank, p, i));
        for (size_t i = 0; i < recv[p]; ++i) want.push_back(Pattern(p, rank, i));
      }
      std::vector<char> out(want.size(), '\xee');
      const std::string what =
          "rank " + std::to_string(rank) + " alltoall pattern " + std::to_string(k);
      HVD_RETURN_IF_ERROR_CTX(Alltoall(comm, in.data(), send, out.data(), recv), what);
      Compare(what, out, want, DataType::kUInt8, 0, &report, &reported);
    }
    return Done(report);
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST_P(Collectives, ReducescatterUnevenCounts) {
  RunResult res = Run([](const Comm& comm, int rank, int size, const std::string&) -> Status {
    const std::vector<std::function<size_t(int)>> patterns = {
        [](int r) -> size_t { return r % 3 == 0 ? 0 : r * 1000 + 3; },
        [size](int r) -> size_t { return r == size - 1 ? 7 : 0; },
        [](int r) -> size_t { return 300000 + r * 1001; },
    };
    std::string report;
    int reported = 0;
    for (size_t k = 0; k < patterns.size(); ++k) {
      std::vector<size_t> counts(size), off(size + 1, 0);
      for (int r = 0; r < size; ++r) {
        counts[r] = patterns[k](r);
        off[r + 1] = off[r] + counts[r];
      }
      const Reference ref(off[size], rank, size);
      for (DataType t : kAllTypes) {
        for (ReduceOp op : kAllOps) {
          if (!CheckReduceDtype(t, op).ok()) continue;  // bool average
          // The large pattern once per dtype class is enough.
          if (k == 2 &&
              !(op == ReduceOp::kAverage && (t == DataType::kFloat32 || t == DataType::kInt32))) {
            continue;
          }
          std::vector<char> in = Input(ref, 0, off[size], t, op);
          std::vector<char> out(counts[rank] * DataTypeSize(t), '\xee');
          const std::string what = "rank " + std::to_string(rank) + " reducescatter pattern " +
                                   std::to_string(k) + " " + std::string(DataTypeName(t)) + " " +
                                   std::string(ReduceOpName(op));
          HVD_RETURN_IF_ERROR_CTX(Reducescatter(comm, in.data(), out.data(), counts, t, op), what);
          Compare(what, out, Expected(ref, off[rank], counts[rank], t, op, size), t, off[rank],
                  &report, &reported);
        }
      }
    }
    return Done(report);
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST_P(Collectives, BarrierSynchronizes) {
  RunResult res = Run([](const Comm& comm, int rank, int size, const std::string& dir) -> Status {
    for (int i = 0; i < 50; ++i)
      HVD_RETURN_IF_ERROR_CTX(Barrier(comm), "barrier " + std::to_string(i));
    // The late rank writes a marker just before entering; nobody may leave before it exists.
    for (int late = 0; late < size; ++late) {
      const std::string marker = dir + "/marker-" + std::to_string(late);
      if (rank == late) {
        std::this_thread::sleep_for(Millis(50));
        std::ofstream(marker) << "here";
      }
      HVD_RETURN_IF_ERROR_CTX(Barrier(comm), "barrier after rank " + std::to_string(late));
      if (!std::filesystem::exists(marker)) {
        return Internal("rank " + std::to_string(rank) + " left the barrier before rank " +
                        std::to_string(late) + " entered it");
      }
    }
    return Status::OK();
  });
  HVD_EXPECT_RANKS_OK(res);
}

INSTANTIATE_TEST_SUITE_P(Grid, Collectives, ::testing::ValuesIn(Grid()),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           return info.param.name + "_" + std::to_string(info.param.ranks) +
                                  "ranks";
                         });

// ---- Determinism ------------------------------------------------------------------------------

// Every algorithm reduces an element in the order its part fixes (collectives.h), so floats whose
// sums depend on the order come out bit-identical from the ring (any chunking), the direct path
// and the hierarchical paths, and equal on every rank; averages too, though the ring divides
// inside its pipeline and the others in a pass afterwards.
TEST(AllreduceAlgorithms, AgreeBitForBit) {
  constexpr size_t kAlways = ~size_t{0};
  std::vector<std::vector<Config>> families = {
      {{"direct", 3, 1, true, kAlways},
       {"ring", 3, 1, true, 0, 4096},
       {"ring", 3, 1, true, 0},
       {"ring_ahead", 3, 1, true, 0, 4096, 0, 3},
       {"ring_stream", 3, 1, true, 0, 4096, 0, 0, 1},
       {"single_copy", 3, 1, true, 0, 4096, 1},
       {"single_copy_stream", 3, 1, true, 0, 4096, 1, 0, 1}},
      {{"direct", 5, 1, true, kAlways},
       {"ring", 5, 1, true, 0, 8192},
       {"tcp", 5},
       {"tcp_ahead", 5, 1, false, 0, 8192, 0, 4},
       {"single_copy", 5, 1, true, 0, 8192, 1}},
      {{"hier_direct", 4, 2, true, kAlways},
       {"hier_ring", 4, 2, true, 0, 4096},
       {"hier_ahead", 4, 2, true, 0, 4096, 0, 2},
       {"hier", 4, 2, true}},
  };
  const std::string why = hvd::testing::CrossMemoryUnavailable();
  if (!why.empty()) {
    std::cout << "without the single-copy allreduce: " << why << "\n";
    for (auto& family : families) {
      family.erase(std::remove_if(family.begin(), family.end(),
                                  [](const Config& c) { return c.single_copy_min > 0; }),
                   family.end());
    }
  }
  for (const auto& family : families) {
    const int n = family[0].ranks;
    RunResult res = RunRanks(n, [&family](int rank, int size, const std::string& dir) -> Status {
      std::vector<std::vector<float>> results;
      for (const Config& c : family) {
        std::unique_ptr<Transport> t;
        HVD_RETURN_IF_ERROR(Connect(c, rank, dir, &t, "config" + std::to_string(results.size())));
        Comm comm = MakeComm(c, t.get(), Millis(30000));
        HVD_RETURN_IF_ERROR(test::EnableSingleCopyAsAsked(c, &comm));
        // The ring scales an average's chunks as they complete, the others after: same bits.
        // Out of place too (the streamed configurations write their output around the cache).
        struct Case {
          size_t count;
          ReduceOp op;
          bool out_of_place;
        };
        for (auto [count, op, out_of_place] :
             {Case{1, ReduceOp::kSum, false}, Case{999, ReduceOp::kSum, false},
              Case{100003, ReduceOp::kSum, false}, Case{999, ReduceOp::kAverage, false},
              Case{100003, ReduceOp::kAverage, false}, Case{100003, ReduceOp::kSum, true},
              Case{100003, ReduceOp::kAverage, true}}) {
          std::vector<float> v(count);
          for (size_t i = 0; i < count; ++i) {
            v[i] = static_cast<float>(Mix(i * 977 + rank) % 100000) * 1e-3f + 1.0f / (rank + 3);
          }
          if (out_of_place) {
            const std::vector<float> in = v;
            HVD_RETURN_IF_ERROR(AllreduceParts(
                comm, in.data(), v.data(), AllreduceLayout(comm, count), DataType::kFloat32, op));
          } else {
            HVD_RETURN_IF_ERROR(Allreduce(comm, v.data(), count, DataType::kFloat32, op));
          }
          // Every rank's bytes, to compare across ranks too.
          std::vector<float> all(count * size);
          HVD_RETURN_IF_ERROR(Allgather(comm, v.data(), all.data(),
                                        std::vector<size_t>(size, count * sizeof(float))));
          if (std::memcmp(all.data(), all.data() + count * rank, count * sizeof(float)) != 0) {
            return Internal(c.name + ": ranks disagree at count " + std::to_string(count));
          }
          results.push_back(std::move(v));
        }
      }
      const size_t per = results.size() / family.size();
      for (size_t k = per; k < results.size(); ++k) {
        if (results[k] != results[k % per]) {
          return Internal(family[k / per].name + " differs from " + family[0].name + " (count " +
                          std::to_string(results[k].size()) + ")");
        }
      }
      return Status::OK();
    });
    HVD_EXPECT_RANKS_OK(res);
  }
}

}  // namespace
}  // namespace hvd::runtime::collectives
