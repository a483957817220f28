// Grouped and byte collectives inside process sets (zero-sized and uneven members, scales and
// average), and Adasum globally and in a set against the reduction tree; every rank its own
// process.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "process_sets_harness.h"

namespace hvd {
namespace {

using testing::Check;
using testing::ExpectEqual;
using testing::InitRankWith;
using testing::sets::BarrierAndShutdown;
using testing::sets::ExpectError;
using testing::sets::Get;
using testing::sets::IndexOf;
using testing::sets::MySets;
using testing::sets::Put;
using testing::sets::RunSets;

// ---- Grouped and byte collectives -------------------------------------------------------------

TEST(Grouped, AllgatherWithZeroSizedAndUnevenMembers) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{1, 2, 3}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    for (int id : MySets()) {
      std::vector<int> members;
      HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &members));
      const int m = static_cast<int>(members.size());
      for (int it = 0; it < 3; ++it) {  // rows change per iteration under one group name
        const std::string what = "set " + std::to_string(id) + " iteration " + std::to_string(it);
        auto rows0 = [&](int r) { return static_cast<int64_t>((r + it) % 3); };  // 0 on some
        std::vector<int32_t> a(rows0(rank) * 2);
        for (size_t i = 0; i < a.size(); ++i) a[i] = rank * 100 + static_cast<int>(i) + it;
        std::vector<float> b;  // [0, 3] everywhere
        std::vector<int64_t> c(rank + 1);
        for (size_t i = 0; i < c.size(); ++i) c[i] = rank * 10 + static_cast<int64_t>(i);
        Handle h = GroupedAllgatherAsync("group",
                                         {Tensor{a.data(), DataType::kInt32, {rows0(rank), 2}},
                                          Tensor{b.data(), DataType::kFloat32, {0, 3}},
                                          Tensor{c.data(), DataType::kInt64, {rank + 1}}},
                                         {}, id);
        HVD_RETURN_IF_ERROR(h.Wait().WithContext(what));
        HVD_RETURN_IF_ERROR(Check(h.output_count() == 3,
                                  what + ": output_count " + std::to_string(h.output_count())));
        std::vector<int32_t> wa;
        std::vector<int64_t> wc, sa, sb(m, 0), sc;
        for (int r : members) {
          sa.push_back(rows0(r));
          for (int i = 0; i < rows0(r) * 2; ++i) wa.push_back(r * 100 + i + it);
          sc.push_back(r + 1);
          for (int i = 0; i <= r; ++i) wc.push_back(r * 10 + i);
        }
        const int32_t* pa = static_cast<const int32_t*>(h.output_data(0));
        HVD_RETURN_IF_ERROR(ExpectEqual(what + " tensor 0",
                                        std::vector<int32_t>(pa, pa + h.output_bytes(0) / 4), wa));
        HVD_RETURN_IF_ERROR(ExpectEqual(what + " splits 0", h.output_splits(0), sa));
        HVD_RETURN_IF_ERROR(
            Check(h.output_shape(0) == std::vector<int64_t>{static_cast<int64_t>(wa.size() / 2), 2},
                  what + " shape 0"));
        HVD_RETURN_IF_ERROR(
            Check(h.output_bytes(1) == 0 && h.output_shape(1) == std::vector<int64_t>{0, 3},
                  what + " tensor 1 must be [0, 3]"));
        HVD_RETURN_IF_ERROR(ExpectEqual(what + " splits 1", h.output_splits(1), sb));
        const int64_t* pc = static_cast<const int64_t*>(h.output_data(2));
        HVD_RETURN_IF_ERROR(ExpectEqual(what + " tensor 2",
                                        std::vector<int64_t>(pc, pc + h.output_bytes(2) / 8), wc));
        HVD_RETURN_IF_ERROR(ExpectEqual(what + " splits 2", h.output_splits(2), sc));
        HVD_RETURN_IF_ERROR(
            Check(h.output_shape(2) == std::vector<int64_t>{static_cast<int64_t>(wc.size())},
                  what + " shape 2"));
      }
    }
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(Grouped, ReducescatterWithZeroSizedMembersScalesAndAverage) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{1, 2, 3}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    for (int id : MySets()) {
      std::vector<int> members;
      HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &members));
      const int m = static_cast<int>(members.size());
      const int k = IndexOf(members, rank);
      auto shares_of = [&](int64_t rows) {
        std::vector<int64_t> s(m);
        for (int q = 0; q < m; ++q) s[q] = rows / m + (q < rows % m ? 1 : 0);
        return s;
      };
      struct Case {
        ReduceOp op;
        double prescale, postscale;
      };
      for (const Case& c : {Case{ReduceOp::kSum, 1, 1}, Case{ReduceOp::kSum, 3, 0.5},
                            Case{ReduceOp::kAverage, 1, 1}, Case{ReduceOp::kAverage, 3, 0.5}}) {
        const std::string what = "set " + std::to_string(id) + " " + ReduceOpName(c.op).data() +
                                 " prescale " + std::to_string(c.prescale) + " postscale " +
                                 std::to_string(c.postscale);
        // t0: float32 [5, 2]; t1: int32 [0, 4]; t2: float64 [2] (fewer rows than ranks);
        // t3: int32 [7].
        std::vector<float> a(10);
        for (int i = 0; i < 10; ++i) a[i] = static_cast<float>(rank * 10 + i);
        std::vector<int32_t> b;
        std::vector<double> d = {static_cast<double>(rank), static_cast<double>(2 * rank)};
        std::vector<int32_t> e(7);
        for (int i = 0; i < 7; ++i) e[i] = rank + i;
        AllreduceOptions ao;
        ao.op = c.op;
        ao.prescale = c.prescale;
        ao.postscale = c.postscale;
        ao.process_set = id;
        Handle h = GroupedReducescatterAsync(
            "rs",
            {Tensor{a.data(), DataType::kFloat32, {5, 2}},
             Tensor{b.data(), DataType::kInt32, {0, 4}}, Tensor{d.data(), DataType::kFloat64, {2}},
             Tensor{e.data(), DataType::kInt32, {7}}},
            ao);
        HVD_RETURN_IF_ERROR(h.Wait().WithContext(what));
        HVD_RETURN_IF_ERROR(Check(h.output_count() == 4,
                                  what + ": output_count " + std::to_string(h.output_count())));
        const double factor = c.postscale / (c.op == ReduceOp::kAverage ? m : 1);
        // Sums of prescaled inputs (integers: exact), then the factor as Scale applies it.
        auto sum_of = [&](auto value) {
          double s = 0;
          for (int r : members) s += c.prescale * value(r);
          return s;
        };
        // t0
        {
          auto sh = shares_of(5);
          int64_t first = 0;
          for (int q = 0; q < k; ++q) first += sh[q];
          std::vector<float> want;
          for (int64_t i = first * 2; i < (first + sh[k]) * 2; ++i) {
            const double s = sum_of([&](int r) { return r * 10 + i; });
            want.push_back(factor == 1 ? static_cast<float>(s)
                                       : static_cast<float>(s) * static_cast<float>(factor));
          }
          const float* p = static_cast<const float*>(h.output_data(0));
          HVD_RETURN_IF_ERROR(
              ExpectEqual(what + " t0", std::vector<float>(p, p + h.output_bytes(0) / 4), want));
          HVD_RETURN_IF_ERROR(ExpectEqual(what + " t0 splits", h.output_splits(0), sh));
          HVD_RETURN_IF_ERROR(
              Check(h.output_shape(0) == std::vector<int64_t>{sh[k], 2}, what + " t0 shape"));
        }
        // t1
        HVD_RETURN_IF_ERROR(
            Check(h.output_bytes(1) == 0 && h.output_shape(1) == std::vector<int64_t>{0, 4},
                  what + " t1 must be [0, 4]"));
        HVD_RETURN_IF_ERROR(
            ExpectEqual(what + " t1 splits", h.output_splits(1), std::vector<int64_t>(m, 0)));
        // t2
        {
          auto sh = shares_of(2);
          int64_t first = 0;
          for (int q = 0; q < k; ++q) first += sh[q];
          std::vector<double> want;
          for (int64_t i = first; i < first + sh[k]; ++i) {
            want.push_back(sum_of([&](int r) { return (i + 1.0) * r; }) * factor);
          }
          const double* p = static_cast<const double*>(h.output_data(2));
          HVD_RETURN_IF_ERROR(
              ExpectEqual(what + " t2", std::vector<double>(p, p + h.output_bytes(2) / 8), want));
          HVD_RETURN_IF_ERROR(ExpectEqual(what + " t2 splits", h.output_splits(2), sh));
          HVD_RETURN_IF_ERROR(
              Check(h.output_shape(2) == std::vector<int64_t>{sh[k]}, what + " t2 shape"));
        }
        // t3
        {
          auto sh = shares_of(7);
          int64_t first = 0;
          for (int q = 0; q < k; ++q) first += sh[q];
          std::vector<int32_t> want;
          for (int64_t i = first; i < first + sh[k]; ++i) {
            const double s = sum_of([&](int r) { return static_cast<double>(r + i); });
            // factor 0.5 / 3 is the double nearest 1/6: an exact division, halves away from 0.
            want.push_back(
                static_cast<int32_t>(testing::sets::ScaleRef(DataType::kInt32, s, factor)));
          }
          const int32_t* p = static_cast<const int32_t*>(h.output_data(3));
          HVD_RETURN_IF_ERROR(
              ExpectEqual(what + " t3", std::vector<int32_t>(p, p + h.output_bytes(3) / 4), want));
          HVD_RETURN_IF_ERROR(ExpectEqual(what + " t3 splits", h.output_splits(3), sh));
        }
      }
    }
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(Bytes, AllgatherBytesOfDifferentLengths) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{1, 2, 3}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    for (int id : MySets()) {
      std::vector<int> members;
      HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &members));
      for (int it = 0; it < 3; ++it) {
        auto len = [&](int r) { return static_cast<size_t>(((r + it) % 3) * 5); };  // 0 on some
        std::string mine(len(rank), '\0');
        for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<char>('a' + rank + i);
        Handle h = AllgatherBytesAsync("pickle", mine.empty() ? nullptr : mine.data(), mine.size(),
                                       {}, id);
        const std::string what = "set " + std::to_string(id) + " iteration " + std::to_string(it);
        HVD_RETURN_IF_ERROR(h.Wait().WithContext(what));
        std::string want;
        std::vector<int64_t> splits;
        for (int r : members) {
          splits.push_back(static_cast<int64_t>(len(r)));
          for (size_t i = 0; i < len(r); ++i) want += static_cast<char>('a' + r + i);
        }
        const std::string got(static_cast<const char*>(h.output_data()), h.output_bytes());
        HVD_RETURN_IF_ERROR(Check(got == want, what + ": got '" + got + "', want '" + want + "'"));
        HVD_RETURN_IF_ERROR(ExpectEqual(what + " splits", h.output_splits(), splits));
      }
    }
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(Bytes, BroadcastBytesSizedByTheRoot) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{1, 2, 3}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    for (int id : MySets()) {
      std::vector<int> members;
      HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &members));
      // One name, sizes changing call to call (no stale cached size), roots changing too.
      const size_t sizes[] = {0, 1, 100000, 100000, 1, 0, 7};
      for (size_t c = 0; c < std::size(sizes); ++c) {
        const size_t n = sizes[c];
        const int root = members[c % members.size()];
        std::string data;
        if (rank == root) {
          data.resize(n);
          for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>((i * 7 + c + root) & 0xff);
        }
        // The others pass nothing, or something of another size: only the root's counts.
        std::string junk(c % 2 ? 3 : 0, 'x');
        Handle h = rank == root ? BroadcastBytesAsync("obj", data.data(), n, root, {}, id)
                                : BroadcastBytesAsync("obj", c % 2 ? junk.data() : nullptr,
                                                      junk.size(), root, {}, id);
        const std::string what = "set " + std::to_string(id) + " call " + std::to_string(c) + " (" +
                                 std::to_string(n) + " bytes from " + std::to_string(root) + ")";
        HVD_RETURN_IF_ERROR(h.Wait().WithContext(what));
        if (rank != root) {
          HVD_RETURN_IF_ERROR(
              Check(h.output_count() == 1 && h.output_bytes() == n,
                    what + ": received " + std::to_string(h.output_bytes()) + " bytes"));
          std::string want(n, '\0');
          for (size_t i = 0; i < n; ++i) want[i] = static_cast<char>((i * 7 + c + root) & 0xff);
          const std::string got(static_cast<const char*>(h.output_data()), h.output_bytes());
          HVD_RETURN_IF_ERROR(Check(got == want, what + ": wrong bytes"));
          HVD_RETURN_IF_ERROR(Check(
              h.output_shape() == std::vector<int64_t>{static_cast<int64_t>(n)}, what + ": shape"));
        }
      }
      // A root outside the set is refused.
      if (id != 0) {
        Status s = BroadcastBytesAsync("obj", nullptr, 0, 0, {}, id).Wait();
        HVD_RETURN_IF_ERROR(ExpectError("byte broadcast from outside root", s,
                                        StatusCode::kInvalidArgument, {"root"}));
      }
    }
    // The root's error (null data) is reported through the callback too.
    if (rank == 0) {
      bool called = false;
      Handle h = BroadcastBytesAsync("bad", nullptr, 5, 0, [&](const Status&) { called = true; });
      HVD_RETURN_IF_ERROR(ExpectError("null bytes", h.Wait(), StatusCode::kInvalidArgument));
      HVD_RETURN_IF_ERROR(Check(called, "the callback of a refused byte broadcast never ran"));
    }
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// ---- Adasum -----------------------------------------------------------------------------------

std::vector<double> AdasumPair(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  const double ca = na >= 1e-8 ? 1 - dot / na * 0.5 : 1;
  const double cb = nb >= 1e-8 ? 1 - dot / nb * 0.5 : 1;
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// The tree of collectives/adasum.cc over x (indexed by set rank).
std::vector<double> AdasumReference(std::vector<std::vector<double>> x) {
  const int n = static_cast<int>(x.size());
  int p = 1;
  while (p * 2 <= n) p *= 2;
  for (int i = 0; i < n - p; ++i) x[i] = AdasumPair(x[i], x[i + p]);
  for (int d = 1; d < p; d *= 2) {
    for (int g = 0; g + d < p; g += 2 * d) x[g] = AdasumPair(x[g], x[g + d]);
  }
  return x[0];
}

double AdasumInput(int rank, int i, int salt) {
  // Neither parallel nor orthogonal: a shared direction plus a per-rank one.
  return std::sin(0.7 * i + salt) + 0.5 * std::cos(1.3 * i * (rank + 1) + rank) + 0.1 * rank;
}

Status RunAdasum(int rank) {
  for (int id : MySets()) {
    std::vector<int> members;
    HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &members));
    for (DataType dt :
         {DataType::kFloat64, DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
      for (int it = 0; it < 2; ++it) {
        const int n = 37;
        const int salt = it + static_cast<int>(dt);
        std::vector<char> buf(n * DataTypeSize(dt));
        for (int i = 0; i < n; ++i) Put(dt, buf.data(), i, AdasumInput(rank, i, salt));
        std::vector<std::vector<double>> xs;
        for (int r : members) {
          std::vector<double> x(n);
          // The reference starts from the values as the dtype holds them.
          for (int i = 0; i < n; ++i) {
            std::vector<char> one(8);
            Put(dt, one.data(), 0, AdasumInput(r, i, salt));
            x[i] = Get(dt, one.data(), 0);
          }
          xs.push_back(std::move(x));
        }
        const std::vector<double> want = AdasumReference(xs);
        AllreduceOptions ao;
        ao.op = ReduceOp::kAdasum;
        ao.process_set = id;
        Tensor t = MakeTensor(buf.data(), dt, n);
        const std::string what = "adasum " + std::string(DataTypeName(dt)) + " in set " +
                                 std::to_string(id) + " iteration " + std::to_string(it);
        HVD_RETURN_IF_ERROR(
            Allreduce("adasum." + std::string(DataTypeName(dt)), t, t, ao).WithContext(what));
        double scale = 0;
        for (double w : want) scale = std::max(scale, std::abs(w));
        const double tol = dt == DataType::kFloat64   ? 1e-12
                           : dt == DataType::kFloat32 ? 1e-5
                           : dt == DataType::kFloat16 ? 1e-2
                                                      : 4e-2;
        for (int i = 0; i < n; ++i) {
          const double got = Get(dt, buf.data(), i);
          if (!(std::abs(got - want[i]) <= tol * std::max(1.0, scale))) {
            return Internal(what + ": element " + std::to_string(i) + " is " + std::to_string(got) +
                            ", want " + std::to_string(want[i]));
          }
        }
      }
    }
    // A grouped Adasum combines each tensor on its own (its own dot products and norms), with
    // prescale and postscale around it (Adasum is homogeneous: the result scales by both).
    {
      const std::vector<int> counts = {13, 0, 5};
      std::vector<std::vector<double>> bufs;
      std::vector<Tensor> ts;
      for (size_t j = 0; j < counts.size(); ++j) {
        std::vector<double>& b = bufs.emplace_back(counts[j]);
        for (int i = 0; i < counts[j]; ++i) b[i] = AdasumInput(rank, i, 40 + static_cast<int>(j));
      }
      for (auto& b : bufs) {
        ts.push_back(MakeTensor(b.data(), DataType::kFloat64, static_cast<int64_t>(b.size())));
      }
      AllreduceOptions ao;
      ao.op = ReduceOp::kAdasum;
      ao.prescale = 2;
      ao.postscale = 0.25;
      ao.process_set = id;
      HVD_RETURN_IF_ERROR(GroupedAllreduce("adasum.group", ts, ts, ao));
      for (size_t j = 0; j < counts.size(); ++j) {
        std::vector<std::vector<double>> xs;
        for (int r : members) {
          std::vector<double> x(counts[j]);
          for (int i = 0; i < counts[j]; ++i) x[i] = AdasumInput(r, i, 40 + static_cast<int>(j));
          xs.push_back(std::move(x));
        }
        const std::vector<double> want = AdasumReference(xs);
        for (int i = 0; i < counts[j]; ++i) {
          if (!(std::abs(bufs[j][i] - 0.5 * want[i]) <= 1e-12)) {
            return Internal("grouped adasum in set " + std::to_string(id) + ": tensor " +
                            std::to_string(j) + " element " + std::to_string(i) + " is " +
                            std::to_string(bufs[j][i]) + ", want " + std::to_string(0.5 * want[i]));
          }
        }
      }
    }
    // Adasum is for floating-point allreduces only.
    std::vector<int32_t> iv(4, 1);
    AllreduceOptions ao;
    ao.op = ReduceOp::kAdasum;
    ao.process_set = id;
    Tensor it = MakeTensor(iv.data(), DataType::kInt32, 4);
    Handle h = AllreduceAsync("adasum.int", it, it, ao);
    HVD_RETURN_IF_ERROR(Check(h.Ready(), "adasum on int32 must fail at once"));
    HVD_RETURN_IF_ERROR(
        ExpectError("adasum on int32", h.Wait(), StatusCode::kInvalidArgument, {"int32"}));
    std::vector<float> fv(4, 1.0f);
    h = ReducescatterAsync("adasum.rs", MakeTensor(fv.data(), DataType::kFloat32, 4), ao);
    HVD_RETURN_IF_ERROR(Check(h.Ready(), "adasum reducescatter must fail at once"));
    HVD_RETURN_IF_ERROR(
        ExpectError("adasum reducescatter", h.Wait(), StatusCode::kInvalidArgument, {"adasum"}));
  }
  return Status::OK();
}

class Adasum : public ::testing::TestWithParam<int> {};

TEST_P(Adasum, MatchesTheTreeGloballyAndInASet) {
  auto res = RunSets(GetParam(), [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    std::vector<int> tail(size - 1);
    std::iota(tail.begin(), tail.end(), 1);
    o.process_sets = {tail};  // 4 ranks: {1, 2, 3}, not a power of two
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    HVD_RETURN_IF_ERROR(RunAdasum(rank));
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Adasum, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

}  // namespace
}  // namespace hvd
