// The full runtime path (negotiation, response cache, fusion, background thread) through the
// public API, with every rank a separate process meeting through a file store.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "core/context.h"
#include "core/operation.h"
#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using testing::Check;
using testing::ExpectEqual;
using testing::InitRank;
using testing::RunRanks;

class AllreduceApi : public ::testing::TestWithParam<int> {};

// Many tensors submitted at once, several dtypes and ops, checked against the exact reference.
TEST_P(AllreduceApi, ManyTensorsEveryOp) {
  const int n = GetParam();
  auto res = RunRanks(n, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    const std::vector<int64_t> counts = {0, 1, 7, 1000, (1 << 16) + 3};
    const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kProduct};
    std::vector<std::vector<double>> bufs;
    std::vector<std::vector<int32_t>> ibufs;
    std::vector<Handle> handles;
    for (int64_t c : counts) {
      for (ReduceOp op : ops) {
        std::vector<double> d(c);
        std::vector<int32_t> i(c);
        for (int64_t k = 0; k < c; ++k) {
          d[k] = (rank + 1) * ((k % 3) + 1);
          i[k] = (rank % 2 ? -1 : 2) * static_cast<int32_t>((k % 4) + 1);
        }
        bufs.push_back(std::move(d));
        ibufs.push_back(std::move(i));
        AllreduceOptions o;
        o.op = op;
        const std::string tag = std::to_string(c) + "." + std::string(ReduceOpName(op));
        handles.push_back(AllreduceAsync("f64." + tag,
                                         MakeTensor(bufs.back().data(), DataType::kFloat64, c),
                                         MakeTensor(bufs.back().data(), DataType::kFloat64, c), o));
        handles.push_back(AllreduceAsync("i32." + tag,
                                         MakeTensor(ibufs.back().data(), DataType::kInt32, c),
                                         MakeTensor(ibufs.back().data(), DataType::kInt32, c), o));
      }
    }
    for (auto& h : handles) HVD_RETURN_IF_ERROR(h.Wait());
    size_t b = 0;
    for (int64_t c : counts) {
      for (ReduceOp op : ops) {
        std::vector<double> want(c);
        std::vector<int32_t> iwant(c);
        for (int64_t k = 0; k < c; ++k) {
          double acc = 0;
          int64_t iacc = 0;
          for (int r = 0; r < size; ++r) {
            double v = (r + 1) * ((k % 3) + 1);
            int64_t iv = (r % 2 ? -1 : 2) * ((k % 4) + 1);
            if (r == 0) {
              acc = v;
              iacc = iv;
            } else if (op == ReduceOp::kSum || op == ReduceOp::kAverage) {
              acc += v;
              iacc += iv;
            } else if (op == ReduceOp::kMin) {
              acc = std::min(acc, v);
              iacc = std::min(iacc, iv);
            } else if (op == ReduceOp::kMax) {
              acc = std::max(acc, v);
              iacc = std::max(iacc, iv);
            } else {
              acc *= v;
              iacc = static_cast<int32_t>(iacc * iv);
            }
          }
          if (op == ReduceOp::kAverage) {
            acc = acc * (1.0 / size);
            iacc = std::llround(static_cast<double>(iacc) * (1.0 / size));
          }
          want[k] = acc;
          iwant[k] = static_cast<int32_t>(iacc);
        }
        const std::string tag = std::to_string(c) + "." + std::string(ReduceOpName(op));
        for (int64_t k = 0; k < c; ++k) {
          if (std::fabs(bufs[b][k] - want[k]) > 1e-9 * std::fabs(want[k])) {
            return Internal("f64." + tag + "[" + std::to_string(k) + "] = " +
                            std::to_string(bufs[b][k]) + ", want " + std::to_string(want[k]));
          }
        }
        HVD_RETURN_IF_ERROR(ExpectEqual("i32." + tag, ibufs[b], iwant));
        ++b;
      }
    }
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllreduceApi, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// Runs `steps` training steps of `tensors` float32 gradients with the given fusion threshold and
// returns rank 0's bytes of every result, so runs can be compared bit for bit.
Status TrainSteps(int rank, int size, const std::string& dir, const std::string& fusion,
                  bool grouped, std::map<std::string, std::string> env, std::vector<float>* out) {
  env["HVD_FUSION_THRESHOLD"] = fusion;
  HVD_RETURN_IF_ERROR(InitRank(rank, size, dir, env));
  const int tensors = 12;
  std::vector<std::vector<float>> grads(tensors);
  for (int step = 0; step < 3; ++step) {
    std::vector<Tensor> ts;
    for (int t = 0; t < tensors; ++t) {
      grads[t].resize(1000 + 37 * t);
      // Values whose float sum depends on the order of additions.
      for (size_t k = 0; k < grads[t].size(); ++k) {
        grads[t][k] =
            0.1f * (rank + 1) + 1e-7f * static_cast<float>(k * (t + 1)) + 1.0f / (step + 3);
      }
      ts.push_back(MakeTensor(grads[t].data(), DataType::kFloat32, grads[t].size()));
    }
    if (grouped) {
      HVD_RETURN_IF_ERROR(GroupedAllreduce("grads", ts, ts));
    } else {
      std::vector<Handle> hs;
      for (int t = 0; t < tensors; ++t) {
        hs.push_back(AllreduceAsync("grad." + std::to_string(t), ts[t], ts[t]));
      }
      for (auto& h : hs) HVD_RETURN_IF_ERROR(h.Wait());
    }
  }
  for (auto& g : grads) out->insert(out->end(), g.begin(), g.end());
  return Shutdown();
}

// Writes rank 0's results of a run into `file` (children cannot return data otherwise).
Status Dump(const std::vector<float>& v, const std::string& file) {
  FILE* f = std::fopen(file.c_str(), "wb");
  if (!f) return Internal("cannot write " + file);
  std::fwrite(v.data(), sizeof(float), v.size(), f);
  std::fclose(f);
  return Status::OK();
}

std::vector<float> Load(const std::string& file) {
  std::vector<float> v;
  FILE* f = std::fopen(file.c_str(), "rb");
  if (!f) return v;
  float x;
  while (std::fread(&x, sizeof x, 1, f) == 1) v.push_back(x);
  std::fclose(f);
  std::remove(file.c_str());
  return v;
}

// `hosts` > 1 simulates that many hosts (HVD_HOSTNAME): shared memory within, TCP across, and
// the hierarchical allreduce. `env` is set on every rank.
std::vector<float> RunTraining(int size, const std::string& fusion, bool grouped, int hosts = 1,
                               const std::map<std::string, std::string>& env = {}) {
  const std::string file = ::testing::TempDir() + "/hvd_train_" + std::to_string(getpid()) + "_" +
                           fusion + (grouped ? "_g" : "_u");
  auto res = RunRanks(size, [&](int rank, int n, const std::string& dir) -> Status {
    setenv("HVD_HOSTNAME", testing::SplitHosts(n, hosts)[rank].c_str(), 1);
    setenv("HVD_ADVERTISE_ADDR", "127.0.0.1", 1);
    std::vector<float> out;
    HVD_RETURN_IF_ERROR(TrainSteps(rank, n, dir, fusion, grouped, env, &out));
    return rank == 0 ? Dump(out, file) : Status::OK();
  });
  EXPECT_TRUE(res.ok()) << res.FailureMessage();
  return Load(file);
}

TEST(Fusion, OnAndOffGiveIdenticalResults) {
  std::vector<float> fused = RunTraining(
      3, "134217728", false, 1,
      {{"HVD_DIRECT_ALLREDUCE_MAX_BYTES_SHM", "0"}, {"HVD_DIRECT_ALLREDUCE_MAX_BYTES_TCP", "0"}});
  std::vector<float> unfused = RunTraining(3, "0", false);
  ASSERT_FALSE(fused.empty());
  ASSERT_EQ(fused.size(), unfused.size());
  EXPECT_EQ(0, std::memcmp(fused.data(), unfused.data(), fused.size() * sizeof(float)))
      << "fused and unfused allreduce differ";
}

// Also with the fused buffer forced through the large-buffer path (local ring in small chunks)
// while the unfused tensors take the small-buffer path.
TEST(Fusion, OnAndOffGiveIdenticalResultsAcrossHosts) {
  std::vector<float> fused = RunTraining(4, "134217728", false, 2,
                                         {{"HVD_DIRECT_ALLREDUCE_MAX_BYTES_SHM", "0"},
                                          {"HVD_DIRECT_ALLREDUCE_MAX_BYTES_TCP", "0"},
                                          {"HVD_RING_CHUNK_BYTES", "4096"}});
  std::vector<float> unfused = RunTraining(4, "0", false, 2);
  ASSERT_FALSE(fused.empty());
  ASSERT_EQ(fused.size(), unfused.size());
  EXPECT_EQ(0, std::memcmp(fused.data(), unfused.data(), fused.size() * sizeof(float)))
      << "fused and unfused hierarchical allreduce differ";
}

TEST(GroupedAllreduce, BitIdenticalRunToRun) {
  std::vector<float> a = RunTraining(3, "134217728", true);
  std::vector<float> b = RunTraining(3, "134217728", true);
  std::vector<float> small_buffer = RunTraining(3, "8192", true);
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  ASSERT_EQ(a.size(), small_buffer.size());
  EXPECT_EQ(0, std::memcmp(a.data(), small_buffer.data(), a.size() * sizeof(float)));
}

// At steady state the same tensors must be settled by the response cache (one small AND per
// cycle), not by gathering requests through rank 0.
TEST(ResponseCache, SteadyStateSkipsTheCoordinator) {
  auto res = RunRanks(3, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    std::vector<float> a(100, 1.0f), b(50, 2.0f);
    const int steps = 20;
    for (int s = 0; s < steps; ++s) {
      Handle ha = AllreduceAsync("a", MakeTensor(a.data(), DataType::kFloat32, 100),
                                 MakeTensor(a.data(), DataType::kFloat32, 100));
      Handle hb = AllreduceAsync("b", MakeTensor(b.data(), DataType::kFloat32, 50),
                                 MakeTensor(b.data(), DataType::kFloat32, 50));
      HVD_RETURN_IF_ERROR(ha.Wait());
      HVD_RETURN_IF_ERROR(hb.Wait());
    }
    auto stats = runtime::core::CurrentEngineStats();
    HVD_RETURN_IF_ERROR(Shutdown());
    // The first step (and a late submission of one tensor) may negotiate; the rest must hit.
    HVD_RETURN_IF_ERROR(Check(
        stats.negotiated <= 4,
        "negotiated " + std::to_string(stats.negotiated) + " keys through rank 0, want <= 4"));
    return Check(stats.cache_hits >= 2 * steps - 4, "only " + std::to_string(stats.cache_hits) +
                                                        " cache hits in " + std::to_string(steps) +
                                                        " steps of 2 tensors");
  });
  HVD_EXPECT_RANKS_OK(res);
}

// Changing a cached tensor's shape invalidates the entry everywhere and renegotiates.
TEST(ResponseCache, ShapeChangeRenegotiates) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    for (int len : {10, 10, 20, 20, 5}) {
      std::vector<int64_t> v(len, rank + 1);
      HVD_RETURN_IF_ERROR(Allreduce("x", MakeTensor(v.data(), DataType::kInt64, len),
                                    MakeTensor(v.data(), DataType::kInt64, len), testing::Sum()));
      HVD_RETURN_IF_ERROR(ExpectEqual("x", v, std::vector<int64_t>(len, 3)));
    }
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// A slot's response replaced while it runs from the cache: with room for one entry, a cycle that
// runs "a" from the cache and negotiates "b" evicts "a" for "b" in the same slot, and the next
// cycle that runs "b" from there must run b's response, not the copy of a's it ran before.
TEST(ResponseCache, ASlotRefilledInTheCycleItRanFromRunsItsNewResponse) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir, {{"HVD_CACHE_CAPACITY", "1"}}));
    for (int i = 0; i < 40; ++i) {
      std::vector<int64_t> a(10, rank + 1), b(30, 10 * (rank + 1));
      Handle ha = AllreduceAsync("a", MakeTensor(a.data(), DataType::kInt64, 10),
                                 MakeTensor(a.data(), DataType::kInt64, 10), testing::Sum());
      Handle hb = AllreduceAsync("b", MakeTensor(b.data(), DataType::kInt64, 30),
                                 MakeTensor(b.data(), DataType::kInt64, 30), testing::Sum());
      HVD_RETURN_IF_ERROR(ha.Wait());
      HVD_RETURN_IF_ERROR(hb.Wait());
      HVD_RETURN_IF_ERROR(ExpectEqual("a " + std::to_string(i), a, std::vector<int64_t>(10, 3)));
      HVD_RETURN_IF_ERROR(ExpectEqual("b " + std::to_string(i), b, std::vector<int64_t>(30, 30)));
    }
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// A NaN scale factor is refused at submission, by name (it would equal no rank's, its own
// included, and every rank would be told the requests mismatch).
TEST(Allreduce, ANanScaleFactorIsRefused) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    float v[2] = {1, 2};
    const Tensor t = MakeTensor(v, DataType::kFloat32, 2);
    for (bool pre : {true, false}) {
      AllreduceOptions o = testing::Sum();
      (pre ? o.prescale : o.postscale) = std::nan("");
      Status s = Allreduce("nan", t, t, o);
      HVD_RETURN_IF_ERROR(Check(s.code() == StatusCode::kInvalidArgument &&
                                    s.message().find(std::string(pre ? "prescale" : "postscale") +
                                                     " factor is NaN") != std::string::npos,
                                "got " + s.ToString()));
      // Infinite (taken before: every element came out inf or NaN).
      (pre ? o.prescale : o.postscale) = -HUGE_VAL;
      s = Allreduce("inf", t, t, o);
      HVD_RETURN_IF_ERROR(Check(s.code() == StatusCode::kInvalidArgument &&
                                    s.message().find(" factor is infinite") != std::string::npos,
                                "got " + s.ToString()));
    }
    HVD_RETURN_IF_ERROR(Allreduce("after", t, t, testing::Sum()));
    HVD_RETURN_IF_ERROR(Check(v[0] == 2 && v[1] == 4, "the next allreduce is wrong"));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(Allreduce, PrescalePostscaleAndOutOfPlace) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    std::vector<float> in(33, static_cast<float>(rank + 1)), out(33, -1.0f);
    AllreduceOptions o;
    o.op = ReduceOp::kSum;
    o.prescale = 2.0;
    o.postscale = 0.5;
    HVD_RETURN_IF_ERROR(Allreduce("scaled", MakeTensor(in.data(), DataType::kFloat32, 33),
                                  MakeTensor(out.data(), DataType::kFloat32, 33), o));
    HVD_RETURN_IF_ERROR(ExpectEqual("out", out, std::vector<float>(33, 3.0f)));
    HVD_RETURN_IF_ERROR(ExpectEqual("in untouched", in, std::vector<float>(33, rank + 1.0f)));

    // Large enough for the ring, which reads an out-of-place input as it goes: apart, the input
    // stays as it was; overlapping the output (a third apart, either way), the result is right.
    const size_t n = 300000;
    std::vector<float> a(n), b(n, -1.0f), want(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = static_cast<float>(rank + i % 97);
      want[i] = static_cast<float>(2 * (i % 97) + 1);
    }
    const std::vector<float> a0 = a;
    HVD_RETURN_IF_ERROR(Allreduce("apart", MakeTensor(a.data(), DataType::kFloat32, n),
                                  MakeTensor(b.data(), DataType::kFloat32, n), testing::Sum()));
    HVD_RETURN_IF_ERROR(ExpectEqual("apart", b, want));
    HVD_RETURN_IF_ERROR(ExpectEqual("apart, input untouched", a, a0));
    for (int shift : {1, -1}) {
      std::vector<float> big(n + n / 3);
      float* input = big.data() + (shift > 0 ? n / 3 : 0);
      float* output = big.data() + (shift > 0 ? 0 : n / 3);
      std::memcpy(input, a0.data(), n * sizeof(float));
      HVD_RETURN_IF_ERROR(Allreduce("overlap" + std::to_string(shift),
                                    MakeTensor(input, DataType::kFloat32, n),
                                    MakeTensor(output, DataType::kFloat32, n), testing::Sum()));
      HVD_RETURN_IF_ERROR(ExpectEqual("overlapping", std::vector<float>(output, output + n), want));
    }
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// Single-tensor allreduces reuse released operations (internal::Operation::Reused): nothing of
// one may carry over into the next. Every varying field in turn (name given or not and of either
// length, shape and dtype, op, scale factors, callback, in or out of place), each result exact.
TEST(Allreduce, ReusedOperationsCarryNothingOver) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    const std::string names[] = {"", "a", "a-name-well-beyond-the-inline-buffer-of-std-string"};
    const std::vector<int64_t> shapes[] = {{5}, {2, 3}, {}, {1, 1, 4}};
    int callbacks = 0;
    for (int i = 0; i < 24; ++i) {
      const std::vector<int64_t>& shape = shapes[i % 4];
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<double> in(n), out(n, -7.0);
      for (int64_t k = 0; k < n; ++k) in[k] = rank + 1 + k;
      AllreduceOptions o;
      o.op = i % 3 == 0 ? ReduceOp::kSum : (i % 3 == 1 ? ReduceOp::kMax : ReduceOp::kAverage);
      o.prescale = i % 2 ? 2.0 : 1.0;
      o.postscale = i % 5 == 0 ? 0.25 : 1.0;
      if (i % 4 == 1) o.callback = [&callbacks](const Status&) { ++callbacks; };
      const bool in_place = i % 2 == 0;
      std::string name = names[i % 3];
      if (!name.empty()) name += "." + std::to_string(i);
      const Tensor input{in.data(), DataType::kFloat64, shape};
      const Tensor output{in_place ? in.data() : out.data(), DataType::kFloat64, shape};
      std::vector<double> want(n);
      for (int64_t k = 0; k < n; ++k) {
        const double a = (1 + k) * o.prescale, b = (2 + k) * o.prescale;
        want[k] = (o.op == ReduceOp::kMax ? b : (o.op == ReduceOp::kSum ? a + b : (a + b) / 2)) *
                  o.postscale;
      }
      HVD_RETURN_IF_ERROR(Allreduce(name, input, output, o));
      const std::vector<double>& got = in_place ? in : out;
      HVD_RETURN_IF_ERROR(ExpectEqual("allreduce " + std::to_string(i), got, want));
    }
    HVD_RETURN_IF_ERROR(Check(callbacks == 6, "callbacks ran " + std::to_string(callbacks) +
                                                  " times, want 6 (one per operation given one)"));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// A released operation comes back to the next single-tensor allreduce of the thread that released
// it, reset: only its name's and specs' memory kept; what its callback held is let go at release.
TEST(OperationPool, AReleasedOperationComesBackResetToThisThread) {
  if (internal::Operation::kPooledPerThread == 0) GTEST_SKIP() << "no pool in sanitizer builds";
  auto held = std::make_shared<int>(1);
  auto op = internal::Operation::Reused();
  internal::Operation* const raw = op.get();
  op->request.type = runtime::negotiation::OpType::kBroadcast;
  op->request.key = "a-name-well-beyond-the-inline-buffer-of-std-string";
  op->request.tensors.resize(1);
  op->request.prescale = 2.0;
  op->request.root = 3;
  op->request.splits = {1, 2};
  op->request.process_set = 4;
  op->callback = [held](const Status&) {};
  op->results.resize(2);
  op->last_joined_rank = 1;
  op->result_id = 5;
  op->Complete(Aborted("done"));
  ASSERT_EQ(held.use_count(), 2);
  op.reset();
  EXPECT_EQ(held.use_count(), 1) << "the callback was kept past release";

  auto again = internal::Operation::Reused();
  ASSERT_EQ(again.get(), raw);
  EXPECT_FALSE(again->done());
  EXPECT_TRUE(again->status().ok()) << again->status().ToString();
  EXPECT_EQ(again->request.type, runtime::negotiation::OpType::kAllreduce);
  EXPECT_EQ(again->request.prescale, 1.0);
  EXPECT_EQ(again->request.root, 0);
  EXPECT_TRUE(again->request.splits.empty());
  EXPECT_EQ(again->request.process_set, 0);
  EXPECT_FALSE(again->callback);
  EXPECT_TRUE(again->results.empty());
  EXPECT_EQ(again->last_joined_rank, -1);
  EXPECT_EQ(again->result_id, -1);
  EXPECT_TRUE(again->request.key.empty());
  EXPECT_GE(again->request.key.capacity(), 50u) << "the name's memory was not kept";
  EXPECT_EQ(again->request.tensors.size(), 1u);  // for the caller to assign into
  // Completes again, as a new operation does.
  again->Complete(Status::OK());
  EXPECT_TRUE(again->done());
}

}  // namespace
}  // namespace hvd

namespace hvd {
namespace {

// An idle engine runs a submission at once rather than at its next cycle tick: with a 5 s cycle
// time, five synchronous allreduces and a shutdown would take 25 s or more otherwise. (A
// behaviour check with a wide margin, not a timing target: bench/allreduce_bench --api 1 measures.)
TEST(Engine, AnIdleEngineRunsASubmissionWithoutWaitingForTheCycleTime) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir, {{"HVD_CYCLE_TIME", "5000"}}));
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> v(16, 1.0f);
    for (int i = 0; i < 5; ++i) {
      Tensor t = MakeTensor(v.data(), DataType::kFloat32, 16);
      HVD_RETURN_IF_ERROR(Allreduce("lone." + std::to_string(i), t, t, testing::Sum()));
    }
    HVD_RETURN_IF_ERROR(ExpectEqual("sum", v, std::vector<float>(16, 32.0f)));
    HVD_RETURN_IF_ERROR(Shutdown());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return Check(seconds < 12.0, "5 allreduces and a shutdown took " + std::to_string(seconds) +
                                     " s with HVD_CYCLE_TIME=5000: the engine waited for ticks");
  });
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd
