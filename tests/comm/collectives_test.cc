// Multi-process tests of the collectives, one forked process per rank (testutil/multiproc.h),
// parameterised over a grid of setups: rank counts x transports (TCP on 127.0.0.1, shared
// memory, both with ranks on simulated hosts) x algorithm thresholds, so that the ring (chunked
// and not), the direct latency path and the hierarchical path each run the whole grid.
//
// Allreduce covers every count x dtype x op on one mesh per rank count. Inputs are small integers
// (sum/min/max/average: [-16, 16]; product: {1, 2, -1}) so every sum and product over <= 8 ranks
// is exact in every dtype (|result| <= 256, exact even in bfloat16) and integer wraparound is
// order-independent; the expected result is therefore computed exactly, and the average exactly
// as the kernel defines it (collectives/reduce.h: float32 x * (float)(1/N), float64 x * (1/N),
// half types rounded from float32, integers rounded half away from zero in long double). bool
// inputs are any byte, a quarter of the elements false on every rank, a quarter true on every
// rank, a quarter true on one rank only and a quarter false on one rank only, so that or (sum,
// max) and and (min, product) each give both results; average is not defined on bool
// (CheckReduceDtype) and is not run.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/reduce.h"
#include "transport/group.h"
#include "testutil/mix.h"
#include "testutil/multiproc.h"

namespace hvd::runtime::collectives {
namespace {

using hvd::testing::RunOptions;
using hvd::testing::RunRanks;
using hvd::testing::RunResult;
using transport::Transport;
using Millis = std::chrono::milliseconds;

constexpr DataType kAllTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                  DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                                  DataType::kInt32,    DataType::kInt64,   DataType::kInt16,
                                  DataType::kBool};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kProduct};
const size_t kCounts[] = {0, 1, 7, 1000, (size_t{1} << 20) + 3};
constexpr int kMaxReported = 8;  // mismatch lines per rank

using hvd::testing::Mix;

// Rank `rank`'s input element i for the sum-like ops, and for product.
int SumInput(int rank, size_t i) {
  return static_cast<int>(Mix(i * 131 + rank) % 33) - 16;
}
int ProdInput(int rank, size_t i) {
  static constexpr int kValues[4] = {1, 2, -1, 1};
  return kValues[Mix(i * 131 + rank + 0x5555) & 3];
}
// bool: 0, or a true byte 1..255 (the kernels must read any non-zero byte as true).
uint8_t BoolInput(int rank, int size, size_t i) {
  const uint64_t kind = Mix(i * 131 + 0x7777) & 3;
  const bool odd_one = Mix(i * 131 + 0x9999) % size == static_cast<uint64_t>(rank);
  const bool truth = kind == 0 ? false : kind == 1 ? true : kind == 2 ? odd_one : !odd_one;
  return truth ? static_cast<uint8_t>(1 + Mix(i * 131 + rank + 0xbbbb) % 255) : 0;
}
bool IsAnd(ReduceOp op) {
  return op == ReduceOp::kMin || op == ReduceOp::kProduct;
}

// int16 and bool take no path through the collectives that float16 and uint8 (same element
// sizes) do not; their kernels are checked exhaustively in reduce_test. To keep the suite's time,
// their largest count runs on up to 4 ranks only (every setup still runs their other counts).
bool SkipLarge(DataType t, size_t count, int size) {
  const bool narrow_extra = t == DataType::kInt16 || t == DataType::kBool;
  return narrow_extra && count > (size_t{1} << 20) && size > 4;
}

// Exact reductions over all ranks, per element (all values fit in int16).
struct Reference {
  std::vector<int16_t> sum, prod, smin, smax;
  std::vector<uint8_t> umin, umax;          // min/max of the inputs cast to uint8
  std::vector<uint8_t> any, all;            // or and and of the bool inputs, as 0 or 1
  std::vector<int8_t> mine_sum, mine_prod;  // this rank's own inputs
  std::vector<uint8_t> mine_bool;

  Reference(size_t count, int rank, int size)
      : sum(count),
        prod(count),
        smin(count),
        smax(count),
        umin(count),
        umax(count),
        any(count),
        all(count),
        mine_sum(count),
        mine_prod(count),
        mine_bool(count) {
    for (size_t i = 0; i < count; ++i) {
      int s = 0, p = 1, lo = 100, hi = -100, ulo = 255, uhi = 0;
      bool some = false, every = true;
      for (int r = 0; r < size; ++r) {
        const int v = SumInput(r, i), w = ProdInput(r, i);
        const int u = static_cast<uint8_t>(v);
        const uint8_t b = BoolInput(r, size, i);
        s += v;
        p *= w;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        ulo = std::min(ulo, u);
        uhi = std::max(uhi, u);
        some = some || b != 0;
        every = every && b != 0;
        if (r == rank) {
          mine_sum[i] = static_cast<int8_t>(v);
          mine_prod[i] = static_cast<int8_t>(w);
          mine_bool[i] = b;
        }
      }
      any[i] = some;
      all[i] = every;
      sum[i] = static_cast<int16_t>(s);
      prod[i] = static_cast<int16_t>(p);
      smin[i] = static_cast<int16_t>(lo);
      smax[i] = static_cast<int16_t>(hi);
      umin[i] = static_cast<uint8_t>(ulo);
      umax[i] = static_cast<uint8_t>(uhi);
    }
  }
};

template <typename T>
void Store(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// Writes the small integer v as dtype t (integers wrap, as C++20 conversions do).
void PutInt(char* p, DataType t, int64_t v) {
  switch (t) {
    case DataType::kFloat32:
      return Store(p, static_cast<float>(v));
    case DataType::kFloat64:
      return Store(p, static_cast<double>(v));
    case DataType::kFloat16:
      return Store(p, FloatToHalf(static_cast<float>(v)));
    case DataType::kBFloat16:
      return Store(p, FloatToBFloat16(static_cast<float>(v)));
    case DataType::kInt8:
      return Store(p, static_cast<int8_t>(v));
    case DataType::kUInt8:
      return Store(p, static_cast<uint8_t>(v));
    case DataType::kInt32:
      return Store(p, static_cast<int32_t>(v));
    case DataType::kInt64:
      return Store(p, static_cast<int64_t>(v));
    case DataType::kInt16:
      return Store(p, static_cast<int16_t>(v));
    case DataType::kBool:
      return Store(p, static_cast<uint8_t>(v != 0));
  }
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// The wrapped sum as dtype t, scaled by 1/size exactly as Scale() does.
void PutAverage(char* p, DataType t, int64_t sum, int size) {
  const double factor = 1.0 / size;
  auto int_avg = [&](auto wrapped) {
    using T = decltype(wrapped);
    Store(p, static_cast<T>(
                 std::round(static_cast<long double>(wrapped) * static_cast<long double>(factor))));
  };
  switch (t) {
    case DataType::kFloat32:
      return Store(p, static_cast<float>(sum) * static_cast<float>(factor));
    case DataType::kFloat64:
      return Store(p, static_cast<double>(sum) * factor);
    case DataType::kFloat16:
      return Store(p, FloatToHalf(static_cast<float>(sum) * static_cast<float>(factor)));
    case DataType::kBFloat16:
      return Store(p, FloatToBFloat16(static_cast<float>(sum) * static_cast<float>(factor)));
    case DataType::kInt8:
      return int_avg(static_cast<int8_t>(sum));
    case DataType::kUInt8:
      return int_avg(static_cast<uint8_t>(sum));
    case DataType::kInt32:
      return int_avg(static_cast<int32_t>(sum));
    case DataType::kInt64:
      return int_avg(static_cast<int64_t>(sum));
    case DataType::kInt16:
      return int_avg(static_cast<int16_t>(sum));
    case DataType::kBool:
      break;  // no average on bool: the tests skip it
  }
}

std::string Show(const char* p, DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return std::to_string(Load<float>(p));
    case DataType::kFloat64:
      return std::to_string(Load<double>(p));
    case DataType::kFloat16:
      return std::to_string(HalfToFloat(Load<uint16_t>(p)));
    case DataType::kBFloat16:
      return std::to_string(BFloat16ToFloat(Load<uint16_t>(p)));
    case DataType::kInt8:
      return std::to_string(Load<int8_t>(p));
    case DataType::kUInt8:
      return std::to_string(Load<uint8_t>(p));
    case DataType::kInt32:
      return std::to_string(Load<int32_t>(p));
    case DataType::kInt64:
      return std::to_string(Load<int64_t>(p));
    case DataType::kInt16:
      return std::to_string(Load<int16_t>(p));
    case DataType::kBool:
      return "byte " + std::to_string(Load<uint8_t>(p));
  }
  return "?";
}

// This rank's input for elements [begin, begin + n) of the reference.
std::vector<char> Input(const Reference& ref, size_t begin, size_t n, DataType t, ReduceOp op) {
  const size_t es = DataTypeSize(t);
  std::vector<char> buf(n * es);
  for (size_t i = 0; i < n; ++i) {
    const size_t k = begin + i;
    if (t == DataType::kBool) {
      buf[i] = static_cast<char>(ref.mine_bool[k]);
    } else {
      PutInt(buf.data() + i * es, t, op == ReduceOp::kProduct ? ref.mine_prod[k] : ref.mine_sum[k]);
    }
  }
  return buf;
}

// The expected result for elements [begin, begin + n).
std::vector<char> Expected(const Reference& ref, size_t begin, size_t n, DataType t, ReduceOp op,
                           int size) {
  const size_t es = DataTypeSize(t);
  std::vector<char> buf(n * es);
  for (size_t i = 0; i < n; ++i) {
    const size_t k = begin + i;
    char* p = buf.data() + i * es;
    if (t == DataType::kBool) {
      // Always 0 or 1, one rank included (its bytes are normalized, as the C ABI promises).
      *p = static_cast<char>(IsAnd(op) ? ref.all[k] : ref.any[k]);
      continue;
    }
    switch (op) {
      case ReduceOp::kSum:
        PutInt(p, t, ref.sum[k]);
        break;
      case ReduceOp::kAverage:
        PutAverage(p, t, ref.sum[k], size);
        break;
      case ReduceOp::kProduct:
        PutInt(p, t, ref.prod[k]);
        break;
      case ReduceOp::kMin:
        PutInt(p, t, t == DataType::kUInt8 ? ref.umin[k] : ref.smin[k]);
        break;
      case ReduceOp::kMax:
        PutInt(p, t, t == DataType::kUInt8 ? ref.umax[k] : ref.smax[k]);
        break;
      case ReduceOp::kAdasum:  // not element-wise, not in kAllOps (adasum_test.cc)
        break;
    }
  }
  return buf;
}

// Appends up to kMaxReported lines naming the first differing elements.
void Compare(const std::string& what, const std::vector<char>& got, const std::vector<char>& want,
             DataType t, size_t index_base, std::string* report, int* reported) {
  if (got == want) return;
  const size_t es = DataTypeSize(t);
  for (size_t i = 0; i * es < want.size() && *reported < kMaxReported; ++i) {
    if (std::memcmp(got.data() + i * es, want.data() + i * es, es) != 0) {
      *report += what + " index " + std::to_string(index_base + i) + ": expected " +
                 Show(want.data() + i * es, t) + ", got " + Show(got.data() + i * es, t) + "\n";
      ++*reported;
    }
  }
}

Status Done(const std::string& report) {
  return report.empty() ? Status::OK() : Internal("mismatches:\n" + report);
}

// One point of the grid.
struct Config {
  std::string name;
  int ranks = 2;
  int hosts = 1;     // simulated hosts (HVD_HOSTNAME groups): shared memory within, TCP across
  bool shm = false;  // false: TCP between every pair
  size_t direct_max = 64 << 10;
  size_t chunk = 256 << 10;
};

void PrintTo(const Config& c, std::ostream* os) {
  *os << c.name << " with " << c.ranks << " ranks";
}

std::vector<Config> Grid() {
  constexpr size_t kAlways = ~size_t{0};
  std::vector<Config> grid;
  for (int n : {1, 2, 3, 4, 5, 8}) grid.push_back({"tcp", n});
  for (int n : {2, 3, 4, 5, 8}) grid.push_back({"shm", n, 1, true});
  // The ring alone, in many small chunks, and the direct path alone, at every size.
  for (int n : {2, 3, 5}) grid.push_back({"shm_ring", n, 1, true, 0, 4096});
  for (int n : {2, 3, 5}) grid.push_back({"shm_direct", n, 1, true, kAlways});
  // Equal hosts: the hierarchical allreduce (both of its paths); unequal: flat over mixed links.
  for (int n : {4, 6}) grid.push_back({"2hosts", n, 2, true});
  grid.push_back({"2hosts_ring", 4, 2, true, 0, 4096});
  grid.push_back({"3hosts_ring", 6, 3, true, 0, 4096});
  grid.push_back({"2hosts_direct", 6, 2, true, kAlways});
  for (int n : {3, 5}) grid.push_back({"2hosts_unequal", n, 2, true});
  return grid;
}

// The communicator of `setup` for this rank, over `t` (which must outlive it).
Comm MakeComm(const Config& setup, Transport* t, Millis idle_timeout) {
  Comm comm;
  comm.transport = t;
  comm.idle_timeout = idle_timeout;
  comm.direct_max_bytes = setup.direct_max;
  comm.ring_chunk_bytes = setup.chunk;
  comm.hierarchy = MakeHierarchy(t, hvd::testing::SplitHosts(setup.ranks, setup.hosts),
                                 setup.direct_max, setup.direct_max);
  return comm;
}

Status Connect(const Config& setup, int rank, const std::string& dir, std::unique_ptr<Transport>* t,
               const std::string& scope = "default") {
  return hvd::testing::ConnectHosts(rank, setup.ranks, dir,
                                    hvd::testing::SplitHosts(setup.ranks, setup.hosts), setup.shm,
                                    t, scope);
}

class Collectives : public ::testing::TestWithParam<Config> {
 protected:
  // Runs `body(comm, rank, size, store_dir)` on every rank of the setup over a fresh transport.
  template <typename Body>
  RunResult Run(Body body, RunOptions options = {}) {
    const Config setup = GetParam();
    return RunRanks(
        setup.ranks,
        [&body, &setup](int rank, int size, const std::string& dir) -> Status {
          std::unique_ptr<Transport> t;
          HVD_RETURN_IF_ERROR(Connect(setup, rank, dir, &t));
          return body(MakeComm(setup, t.get(), Millis(30000)), rank, size, dir);
        },
        options);
  }
};

TEST_P(Collectives, AllreduceEveryCountDtypeOp) {
  RunResult res = Run([](const Comm& comm, int rank, int size, const std::string&) -> Status {
    std::string report;
    int reported = 0;
    for (size_t count : kCounts) {
      const Reference ref(count, rank, size);
      for (DataType t : kAllTypes) {
        for (ReduceOp op : kAllOps) {
          if (!CheckReduceDtype(t, op).ok()) continue;  // bool average
          if (SkipLarge(t, count, size)) continue;
          std::vector<char> buf = Input(ref, 0, count, t, op);
          const std::string what = "rank " + std::to_string(rank) + " count " +
                                   std::to_string(count) + " " + std::string(DataTypeName(t)) +
                                   " " + std::string(ReduceOpName(op));
          HVD_RETURN_IF_ERROR_CTX(Allreduce(comm, buf.data(), count, t, op), what);
          Compare(what, buf, Expected(ref, 0, count, t, op, size), t, 0, &report, &reported);
        }
      }
    }
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
  const std::vector<std::vector<Config>> families = {
      {{"direct", 3, 1, true, kAlways}, {"ring", 3, 1, true, 0, 4096}, {"ring", 3, 1, true, 0}},
      {{"direct", 5, 1, true, kAlways}, {"ring", 5, 1, true, 0, 8192}, {"tcp", 5}},
      {{"hier_direct", 4, 2, true, kAlways},
       {"hier_ring", 4, 2, true, 0, 4096},
       {"hier", 4, 2, true}},
  };
  for (const auto& family : families) {
    const int n = family[0].ranks;
    RunResult res = RunRanks(n, [&family](int rank, int size, const std::string& dir) -> Status {
      std::vector<std::vector<float>> results;
      for (const Config& c : family) {
        std::unique_ptr<Transport> t;
        HVD_RETURN_IF_ERROR(Connect(c, rank, dir, &t, "config" + std::to_string(results.size())));
        const Comm comm = MakeComm(c, t.get(), Millis(30000));
        // The ring scales an average's chunks as they complete, the others after: same bits.
        for (auto [count, op] : {std::pair{size_t{1}, ReduceOp::kSum},
                                 {size_t{999}, ReduceOp::kSum},
                                 {size_t{100003}, ReduceOp::kSum},
                                 {size_t{999}, ReduceOp::kAverage},
                                 {size_t{100003}, ReduceOp::kAverage}}) {
          std::vector<float> v(count);
          for (size_t i = 0; i < count; ++i) {
            v[i] = static_cast<float>(Mix(i * 977 + rank) % 100000) * 1e-3f + 1.0f / (rank + 3);
          }
          HVD_RETURN_IF_ERROR(Allreduce(comm, v.data(), count, DataType::kFloat32, op));
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

// ---- Failures --------------------------------------------------------------------------------

constexpr int kFailRanks = 4;
constexpr int kVictim = 2;

// Every surviving rank must get an error naming a peer, quickly, instead of hanging; the victim's
// successor (rank 3, which receives from it in every setup below) must name the victim itself.
// The ranks return OK when the collective failed as it should, so the harness result says which
// did not.
Status ExpectPeerFailure(const Comm& comm, int rank, Millis limit) {
  std::vector<float> buf(4 << 20, 1.0f);  // 16 MiB
  const auto start = std::chrono::steady_clock::now();
  Status s = Allreduce(comm, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  const auto took = std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - start);
  const std::string line = "rank " + std::to_string(rank) + " after " +
                           std::to_string(took.count()) + " ms: " + s.ToString() + "\n";
  fputs(line.c_str(), stderr);  // one write: ranks print concurrently
  if (s.ok()) return Internal("allreduce with a dead peer succeeded");
  if (took > limit) return Internal("took " + std::to_string(took.count()) + " ms to fail");
  if (s.message().find("rank ") == std::string::npos) {
    return Internal("error names no peer: " + s.ToString());
  }
  const std::string victim = "rank " + std::to_string(kVictim) + " (";
  if (rank == kVictim + 1 && s.message().find(victim) == std::string::npos) {
    return Internal("error does not name the victim (" + victim + "...): " + s.ToString());
  }
  return Status::OK();
}

// Flat TCP, shared memory, and the hierarchical path over both (ranks 2-3 on the second host).
class CollectivesFailure : public ::testing::TestWithParam<Config> {};

TEST_P(CollectivesFailure, KilledPeerFailsEveryRankQuickly) {
  RunOptions options;
  options.timeout = Millis(60000);
  options.failure_grace = Millis(30000);  // the victim's death must not cut the others short
  RunResult res = RunRanks(
      kFailRanks,
      [setup = GetParam()](int rank, int size, const std::string& dir) -> Status {
        std::unique_ptr<Transport> t;
        HVD_RETURN_IF_ERROR(Connect(setup, rank, dir, &t));
        const Comm comm = MakeComm(setup, t.get(), Millis(5000));
        int32_t warm = 1;  // the mesh works before the failure
        HVD_RETURN_IF_ERROR(Allreduce(comm, &warm, 1, DataType::kInt32, ReduceOp::kSum));
        if (rank == kVictim) raise(SIGKILL);
        return ExpectPeerFailure(comm, rank, Millis(4000));
      },
      options);
  ASSERT_EQ(res.ranks.size(), static_cast<size_t>(kFailRanks));
  EXPECT_EQ(res.ranks[kVictim].term_signal, SIGKILL) << res.ranks[kVictim].Describe();
  for (int r = 0; r < kFailRanks; ++r) {
    if (r == kVictim) continue;
    EXPECT_TRUE(res.ranks[r].ok()) << res.ranks[r].Describe();
  }
}

TEST_P(CollectivesFailure, HungPeerFailsByIdleTimeout) {
  // A stopped rank keeps its sockets open: only the idle timeout can detect it. The survivors
  // report an expected error (ABORTED, "survived: ...") so the harness kills the stopped rank.
  RunOptions options;
  options.timeout = Millis(60000);
  options.failure_grace = Millis(2000);
  RunResult res = RunRanks(
      kFailRanks,
      [setup = GetParam()](int rank, int size, const std::string& dir) -> Status {
        std::unique_ptr<Transport> t;
        HVD_RETURN_IF_ERROR(Connect(setup, rank, dir, &t));
        const Comm comm = MakeComm(setup, t.get(), Millis(3000));
        HVD_RETURN_IF_ERROR(Barrier(comm));
        if (rank == kVictim) raise(SIGSTOP);
        Status s = ExpectPeerFailure(comm, rank, Millis(10000));
        if (!s.ok()) return s;
        return Aborted("survived: the hung peer was detected");
      },
      options);
  ASSERT_EQ(res.ranks.size(), static_cast<size_t>(kFailRanks));
  EXPECT_TRUE(res.ranks[kVictim].killed_by_harness) << res.ranks[kVictim].Describe();
  for (int r = 0; r < kFailRanks; ++r) {
    if (r == kVictim) continue;
    EXPECT_EQ(res.ranks[r].status.message(), "survived: the hung peer was detected")
        << res.ranks[r].Describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, CollectivesFailure,
                         ::testing::Values(Config{"tcp", kFailRanks},
                                           Config{"shm", kFailRanks, 1, true},
                                           Config{"2hosts", kFailRanks, 2, true}),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           return info.param.name;
                         });

// On a process set's communicator (a group view of job ranks 1, 2, 3), errors name job ranks:
// the tree broadcast from set rank 2 is "root 3", the rank that died.
TEST(CollectivesFailure, GroupViewErrorsNameJobRanks) {
  RunOptions options;
  options.timeout = Millis(60000);
  options.failure_grace = Millis(30000);
  RunResult res = RunRanks(
      4,
      [](int rank, int size, const std::string& dir) -> Status {
        const Config setup{"tcp", 4};
        std::unique_ptr<Transport> t;
        HVD_RETURN_IF_ERROR(Connect(setup, rank, dir, &t));
        if (rank == 0) return Barrier(MakeComm(setup, t.get(), Millis(5000)));
        HVD_RETURN_IF_ERROR(Barrier(MakeComm(setup, t.get(), Millis(5000))));
        const std::vector<int> members = {1, 2, 3};
        std::unique_ptr<Transport> view = hvd::runtime::transport::NewGroupView(t.get(), members);
        Comm comm = MakeComm(setup, t.get(), Millis(5000)).Over(view.get());
        comm.job_ranks = std::make_shared<const std::vector<int>>(members);
        if (rank == 3) raise(SIGKILL);
        std::vector<float> buf(16, 1.0f);  // small: the tree, whose errors name the root
        Status s = Broadcast(comm, buf.data(), buf.size() * sizeof(float), /*root=*/2);
        if (s.ok()) return Internal("broadcast from a dead root succeeded");
        if (s.message().find("root 3") == std::string::npos ||
            s.message().find("root 2") != std::string::npos) {
          return Internal("error does not name the root by its job rank 3: " + s.ToString());
        }
        return Status::OK();
      },
      options);
  ASSERT_EQ(res.ranks.size(), 4u);
  EXPECT_EQ(res.ranks[3].term_signal, SIGKILL) << res.ranks[3].Describe();
  for (int r : {0, 1, 2}) EXPECT_TRUE(res.ranks[r].ok()) << res.ranks[r].Describe();
}

// ---- The harness itself -----------------------------------------------------------------------

TEST(MultiprocHarness, ReportsStatusesExitsSignalsAndExceptions) {
  RunOptions options;
  options.failure_grace = Millis(10000);
  RunResult res = RunRanks(
      5,
      [](int rank, int, const std::string& dir) -> Status {
        if (!std::filesystem::is_directory(dir)) return Internal("no store dir " + dir);
        switch (rank) {
          case 1:
            return Unavailable("rank 1 says no");
          case 2:
            raise(SIGKILL);
            break;
          case 3:
            throw std::runtime_error("boom");
          case 4:
            _exit(3);
        }
        return Status::OK();
      },
      options);
  ASSERT_EQ(res.ranks.size(), 5u);
  EXPECT_FALSE(res.ok());
  EXPECT_FALSE(res.timed_out);
  EXPECT_TRUE(res.ranks[0].ok()) << res.ranks[0].Describe();
  EXPECT_EQ(res.ranks[1].status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(res.ranks[1].status.message(), "rank 1 says no");
  EXPECT_EQ(res.ranks[1].exit_code, 1);
  EXPECT_EQ(res.ranks[2].term_signal, SIGKILL);
  EXPECT_FALSE(res.ranks[2].reported);
  EXPECT_NE(res.ranks[3].status.message().find("boom"), std::string::npos);
  EXPECT_FALSE(res.ranks[4].reported);
  EXPECT_EQ(res.ranks[4].exit_code, 3);
  const std::string msg = res.FailureMessage();
  for (const char* part : {"rank 1: UNAVAILABLE: rank 1 says no", "rank 2:", "boom", "rank 4:"}) {
    EXPECT_NE(msg.find(part), std::string::npos) << part << " not in:\n" << msg;
  }
  EXPECT_EQ(msg.find("rank 0"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(res.store_dir));
}

TEST(MultiprocHarness, TimeoutKillsAndReapsEveryRank) {
  RunOptions options;
  options.timeout = Millis(1000);
  RunResult res = RunRanks(
      3,
      [](int rank, int, const std::string&) -> Status {
        if (rank == 0) return Status::OK();
        for (;;) pause();
      },
      options);
  EXPECT_TRUE(res.timed_out);
  EXPECT_LT(res.elapsed, Millis(5000));
  EXPECT_TRUE(res.ranks[0].ok()) << res.ranks[0].Describe();
  for (int r : {1, 2}) {
    EXPECT_TRUE(res.ranks[r].killed_by_harness) << res.ranks[r].Describe();
    EXPECT_EQ(res.ranks[r].term_signal, SIGKILL);
  }
}

TEST(MultiprocHarness, FailureGraceKillsTheRest) {
  RunOptions options;
  options.failure_grace = Millis(500);
  RunResult res = RunRanks(
      2,
      [](int rank, int, const std::string&) -> Status {
        if (rank == 0) return Internal("first failure");
        for (;;) pause();
      },
      options);
  EXPECT_FALSE(res.timed_out);
  EXPECT_LT(res.elapsed, Millis(5000));
  EXPECT_EQ(res.ranks[0].status.message(), "first failure");
  EXPECT_TRUE(res.ranks[1].killed_by_harness) << res.ranks[1].Describe();
}

}  // namespace
}  // namespace hvd::runtime::collectives
