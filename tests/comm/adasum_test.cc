// Multi-process tests of Adasum (collectives/adasum.cc), one forked process per rank
// (testutil/multiproc.h), over 1, 2, 3, 4, 5 and 8 ranks on TCP and a few on shared memory.
//
// The reference is the reduction tree that adasum.cc documents, evaluated in double per tensor
// on the inputs as the dtype holds them:
//   y_i = adasum(x_i, x_{i+P}) for i < N - P, else x_i (P the largest power of two <= N);
//   y_g = adasum(y_g, y_{g+d}) for d = 1, 2, .., P/2 and g a multiple of 2d; the result is y_0.
// Inputs are correlated across ranks (a shared component scaled per rank plus per-rank noise), so
// the coefficients are far from 1 and a plain sum would fail the comparison. The collective rounds
// intermediate results to the dtype and sums dot products in pieces, so the comparison allows an
// error relative to the element plus the tensor's RMS (elements near zero after cancellation
// carry the absolute rounding error of their tensor's scale). Two properties are exact and are
// compared bit for bit: adasum(a, a) = a, and mutually orthogonal vectors add.
#include <signal.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/reduce.h"
#include "testutil/expect.h"
#include "testutil/mix.h"
#include "testutil/multiproc.h"

namespace hvd::runtime::collectives {
namespace {

using hvd::testing::RunRanks;
using hvd::testing::RunResult;
using transport::Transport;
using Millis = std::chrono::milliseconds;

constexpr int kMaxReported = 8;  // mismatch lines per rank

using hvd::testing::Mix;

// Uniform in [-1, 1).
double Uniform(uint64_t seed) {
  return static_cast<double>(Mix(seed) >> 11) * 0x1p-52 - 1.0;
}

void Put(char* p, DataType t, double v) {
  switch (t) {
    case DataType::kFloat32: {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      return;
    }
    case DataType::kFloat64:
      std::memcpy(p, &v, 8);
      return;
    case DataType::kFloat16: {
      const uint16_t h = FloatToHalf(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      return;
    }
    case DataType::kBFloat16: {
      const uint16_t h = FloatToBFloat16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      return;
    }
    default:
      return;
  }
}

double Get(const char* p, DataType t) {
  switch (t) {
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return HalfToFloat(h);
    }
    case DataType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return BFloat16ToFloat(h);
    }
    default:
      return NAN;
  }
}

// Rank r's element i of tensor t: correlated across ranks. Rank 1's tensor 2 is all zeros, so
// the norm guard (coefficient 1 for a norm below 1e-8) runs wherever a layout has three tensors.
double InputValue(int rank, size_t t, size_t i) {
  if (rank == 1 && t == 2) return 0.0;
  const double shared = Uniform((t << 40) ^ i);
  const double noise =
      Uniform((uint64_t{1} << 62) ^ (static_cast<uint64_t>(rank) << 48) ^ (t << 40) ^ i);
  return shared * (1.0 + 0.25 * rank) + 0.5 * noise;
}

// Horovod's pairwise operator, in double: a = adasum(a, b).
void AdasumInto(std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  const double ca = na >= 1e-8 ? 1.0 - dot / na * 0.5 : 1.0;
  const double cb = nb >= 1e-8 ? 1.0 - dot / nb * 0.5 : 1.0;
  for (size_t i = 0; i < a.size(); ++i) a[i] = ca * a[i] + cb * b[i];
}

// The documented tree over `x` (one vector per rank); returns y_0.
std::vector<double> Tree(std::vector<std::vector<double>> x) {
  const int n = static_cast<int>(x.size());
  int p = 1;
  while (p * 2 <= n) p *= 2;
  for (int i = 0; i + p < n; ++i) AdasumInto(x[i], x[i + p]);
  for (int d = 1; d < p; d *= 2) {
    for (int g = 0; g < p; g += 2 * d) AdasumInto(x[g], x[g + d]);
  }
  return x[0];
}

// Rank `rank`'s buffer for `counts`, as dtype t.
std::vector<char> Input(int rank, const std::vector<size_t>& counts, DataType t) {
  const size_t es = DataTypeSize(t);
  size_t total = 0;
  for (size_t c : counts) total += c;
  std::vector<char> buf(total * es);
  size_t k = 0;
  for (size_t ti = 0; ti < counts.size(); ++ti) {
    for (size_t i = 0; i < counts[ti]; ++i, ++k)
      Put(buf.data() + k * es, t, InputValue(rank, ti, i));
  }
  return buf;
}

// Relative tolerance per dtype: a few roundings to the type at each of up to four levels, with
// coefficients near 1/2 (float64 only sees the dot products' summation order).
double Tolerance(DataType t) {
  switch (t) {
    case DataType::kFloat64:
      return 1e-12;
    case DataType::kFloat32:
      return 5e-6;
    case DataType::kFloat16:
      return 4e-3;
    default:  // bfloat16
      return 3e-2;
  }
}

// Checks `got` (this rank's result) against the tree over every rank's input; appends mismatch
// lines to `report`.
void CheckAgainstTree(const std::string& what, const std::vector<char>& got,
                      const std::vector<size_t>& counts, DataType t, int size, std::string* report,
                      int* reported) {
  const size_t es = DataTypeSize(t);
  const double tol = Tolerance(t);
  size_t base = 0;
  for (size_t ti = 0; ti < counts.size(); ++ti) {
    std::vector<std::vector<double>> x(size, std::vector<double>(counts[ti]));
    for (int r = 0; r < size; ++r) {
      std::vector<char> one(es);
      for (size_t i = 0; i < counts[ti]; ++i) {
        Put(one.data(), t, InputValue(r, ti, i));  // the input as the dtype holds it
        x[r][i] = Get(one.data(), t);
      }
    }
    const std::vector<double> want = Tree(std::move(x));
    double sq = 0;
    for (double w : want) sq += w * w;
    const double rms = want.empty() ? 0 : std::sqrt(sq / want.size());
    for (size_t i = 0; i < want.size() && *reported < kMaxReported; ++i) {
      const double g = Get(got.data() + (base + i) * es, t);
      if (!(std::fabs(g - want[i]) <= tol * (std::fabs(want[i]) + rms))) {
        *report += what + " tensor " + std::to_string(ti) + " index " + std::to_string(i) +
                   ": expected " + std::to_string(want[i]) + ", got " + std::to_string(g) +
                   " (tolerance " + std::to_string(tol) + " x (|expected| + rms " +
                   std::to_string(rms) + "))\n";
        ++*reported;
      }
    }
    base += counts[ti];
  }
}

// Appends a line when any rank's bytes differ from this rank's.
Status CheckSameOnEveryRank(const Comm& comm, const std::string& what,
                            const std::vector<char>& mine, std::string* report) {
  const int n = comm.size();
  std::vector<char> all(mine.size() * n);
  HVD_RETURN_IF_ERROR_CTX(
      Allgather(comm, mine.data(), all.data(), std::vector<size_t>(n, mine.size())),
      what + ": allgather of the results");
  for (int q = 0; q < n; ++q) {
    if (!std::equal(mine.begin(), mine.end(), all.begin() + q * mine.size())) {
      *report += what + ": rank " + std::to_string(q) + "'s bytes differ from rank " +
                 std::to_string(comm.rank()) + "'s\n";
    }
  }
  return Status::OK();
}

Status Done(const std::string& report) {
  return report.empty() ? Status::OK() : Internal("mismatches:\n" + report);
}

std::string Name(const std::vector<size_t>& counts) {
  std::string s = "{";
  for (size_t i = 0; i < counts.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(counts[i]);
  }
  return s + "}";
}

struct Config {
  int ranks = 1;
  bool shm = false;  // shared memory between all ranks (one host); TCP otherwise
};

void PrintTo(const Config& c, std::ostream* os) {
  *os << c.ranks << " ranks over " << (c.shm ? "shared memory" : "TCP");
}

class Adasum : public ::testing::TestWithParam<Config> {
 protected:
  // Runs `body(comm, rank, size)` on every rank over a fresh transport.
  template <typename Body>
  RunResult Run(Body body) {
    const Config setup = GetParam();
    return RunRanks(setup.ranks,
                    [&body, &setup](int rank, int size, const std::string& dir) -> Status {
                      std::unique_ptr<Transport> t;
                      HVD_RETURN_IF_ERROR(hvd::testing::ConnectHosts(
                          rank, size, dir, hvd::testing::SplitHosts(size, 1), setup.shm, &t));
                      Comm comm;
                      comm.transport = t.get();
                      comm.idle_timeout = Millis(30000);
                      return body(comm, rank, size);
                    });
  }
};

TEST_P(Adasum, MatchesTheReferenceTree) {
  RunResult res = Run([](const Comm& comm, int rank, int size) -> Status {
    struct Case {
      std::vector<size_t> counts;
      std::vector<DataType> dtypes;
    };
    const std::vector<DataType> wide = {DataType::kFloat32, DataType::kFloat64};
    const std::vector<Case> cases = {
        {{}, wide},
        {{0}, wide},
        {{1}, wide},
        {{7}, wide},
        {{1000}, wide},
        {{(size_t{1} << 16) + 3}, wide},
        {{300, 0, 1234},
         {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}},
    };
    std::string report;
    int reported = 0;
    for (const Case& c : cases) {
      for (DataType t : c.dtypes) {
        const std::string what = "rank " + std::to_string(rank) + " " + Name(c.counts) + " " +
                                 std::string(DataTypeName(t));
        std::vector<char> buf = Input(rank, c.counts, t);
        HVD_RETURN_IF_ERROR_CTX(AdasumAllreduce(comm, buf.data(), c.counts, t), what);
        CheckAgainstTree(what, buf, c.counts, t, size, &report, &reported);
        HVD_RETURN_IF_ERROR(CheckSameOnEveryRank(comm, what, buf, &report));
      }
    }
    return Done(report);
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST_P(Adasum, ExactProperties) {
  RunResult res = Run([](const Comm& comm, int rank, int size) -> Status {
    std::string report;
    const std::vector<size_t> counts = {1000, 0, 77};
    const size_t total = 1077;
    for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16}) {
      const size_t es = DataTypeSize(t);
      const std::string type(DataTypeName(t));
      // The same vector everywhere: adasum(a, a) = a at every level, bit for bit.
      std::vector<char> same(total * es);
      for (size_t i = 0; i < total; ++i) Put(same.data() + i * es, t, Uniform(i));
      std::vector<char> buf = same;
      HVD_RETURN_IF_ERROR_CTX(AdasumAllreduce(comm, buf.data(), counts, t), "identical " + type);
      if (buf != same)
        report += "rank " + std::to_string(rank) + " identical " + type + ": not a\n";

      // Element i only on rank i % size: the vectors (and every partial result) are orthogonal,
      // so every coefficient is exactly 1 and the result is their sum, each element's one value.
      std::vector<char> sum(total * es);
      for (size_t i = 0; i < total; ++i) {
        const double v = 1.0 + Uniform(i + 7777) * 0.5;  // never 0
        Put(sum.data() + i * es, t, v);
        Put(buf.data() + i * es, t, static_cast<int>(i % size) == rank ? v : 0.0);
      }
      HVD_RETURN_IF_ERROR_CTX(AdasumAllreduce(comm, buf.data(), counts, t), "orthogonal " + type);
      if (buf != sum)
        report += "rank " + std::to_string(rank) + " orthogonal " + type + ": not a+b\n";
    }
    return Done(report);
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST_P(Adasum, RefusesIntegersOnEveryRank) {
  RunResult res = Run([](const Comm& comm, int rank, int) -> Status {
    std::vector<int32_t> ints(100, rank);
    Status s = AdasumAllreduce(comm, ints.data(), {100}, DataType::kInt32);
    if (s.code() != StatusCode::kInvalidArgument ||
        s.message() !=
            "Adasum needs floating-point tensors (float16, bfloat16, float32, float64); got "
            "int32") {
      return Internal("int32: expected INVALID_ARGUMENT, got " + s.ToString());
    }
    if (ints != std::vector<int32_t>(100, rank)) return Internal("int32 buffer was modified");
    // Nothing was sent: the links are still in step for the next collective.
    std::vector<float> ones(10, 1.0f);
    HVD_RETURN_IF_ERROR_CTX(AdasumAllreduce(comm, ones.data(), {10}, DataType::kFloat32),
                            "float32 after the refused int32");
    if (ones != std::vector<float>(10, 1.0f)) return Internal("adasum of equal vectors changed");
    return Status::OK();
  });
  HVD_EXPECT_RANKS_OK(res);
}

std::vector<Config> Grid() {
  std::vector<Config> grid;
  for (int n : {1, 2, 3, 4, 5, 8}) grid.push_back({n, false});
  for (int n : {3, 8}) grid.push_back({n, true});
  return grid;
}

INSTANTIATE_TEST_SUITE_P(Grid, Adasum, ::testing::ValuesIn(Grid()),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           return std::string(info.param.shm ? "shm" : "tcp") +
                                  std::to_string(info.param.ranks);
                         });

// A peer killed mid-job fails every other rank within the idle timeout, each error saying it
// was Adasum and naming a peer; the victim's neighbour names the victim. Victim 4 of 5 is an
// extra rank (its fold-in never arrives), victim 1 a partner at the first level.
class AdasumFailure : public ::testing::TestWithParam<int> {};

TEST_P(AdasumFailure, KilledPeerIsNamed) {
  constexpr int kRanks = 5;
  const int victim = GetParam();
  hvd::testing::RunOptions options;
  options.timeout = Millis(60000);
  options.failure_grace = Millis(30000);  // the victim's death must not cut the others short
  RunResult res = RunRanks(
      kRanks,
      [victim](int rank, int size, const std::string& dir) -> Status {
        std::unique_ptr<Transport> t;
        HVD_RETURN_IF_ERROR(hvd::testing::ConnectTcp(rank, size, dir, &t));
        Comm comm;
        comm.transport = t.get();
        comm.idle_timeout = Millis(5000);
        HVD_RETURN_IF_ERROR(Barrier(comm));  // the mesh works before the failure
        if (rank == victim) raise(SIGKILL);
        std::vector<float> buf(1000, 1.0f + rank);
        Status s = AdasumAllreduce(comm, buf.data(), {400, 600}, DataType::kFloat32);
        if (s.ok()) return Internal("adasum with a dead peer succeeded");
        const std::string line = "rank " + std::to_string(rank) + ": " + s.ToString() + "\n";
        fputs(line.c_str(), stderr);  // one write: ranks print concurrently
        if (s.message().find("adasum") == std::string::npos ||
            s.message().find("rank ") == std::string::npos) {
          return Internal("error names neither adasum nor a peer: " + s.ToString());
        }
        // The victim's partner: rank 0 for the extra rank 4, rank 0 also for rank 1.
        const std::string named = "rank " + std::to_string(victim) + " (";
        if (rank == 0 && s.message().find(named) == std::string::npos) {
          return Internal("rank 0's error does not name " + named + "...): " + s.ToString());
        }
        const std::string phase = victim == 4 ? "adasum fold-in" : "adasum level 1/2";
        if (rank == 0 && s.message().find(phase) == std::string::npos) {
          return Internal("rank 0's error does not name the phase (" + phase +
                          "): " + s.ToString());
        }
        return Status::OK();
      },
      options);
  ASSERT_EQ(res.ranks.size(), static_cast<size_t>(kRanks));
  EXPECT_EQ(res.ranks[victim].term_signal, SIGKILL) << res.ranks[victim].Describe();
  for (int r = 0; r < kRanks; ++r) {
    if (r == victim) continue;
    EXPECT_TRUE(res.ranks[r].ok()) << res.ranks[r].Describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Victims, AdasumFailure, ::testing::Values(1, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "rank" + std::to_string(info.param);
                         });

// Refused before any communication, with or without a transport.
TEST(AdasumArguments, NamesTheUnsupportedType) {
  Comm comm;  // no transport: the dtype is checked first
  std::vector<int64_t> buf(4);
  for (DataType t : {DataType::kInt8, DataType::kUInt8, DataType::kInt32, DataType::kInt64}) {
    Status s = AdasumAllreduce(comm, buf.data(), {4}, t);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_HAS(s.message(),
               "Adasum needs floating-point tensors (float16, bfloat16, float32, "
               "float64); got " +
                   std::string(DataTypeName(t)));
  }
}

}  // namespace
}  // namespace hvd::runtime::collectives
