// What the process-set suites (tests/runtime/process_sets*_test.cc) share: a deadline on every
// run, exact typed data and references for every dtype, error checks that name what is missing,
// and the checks of a rank's view of the set table.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <numeric>
#include <string>
#include <vector>

#include "collectives/reduce.h"
#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd::testing::sets {

using runtime::collectives::BFloat16ToFloat;
using runtime::collectives::FloatToBFloat16;
using runtime::collectives::FloatToHalf;
using runtime::collectives::HalfToFloat;

// RunRanks with a deadline that keeps a hang from stalling the whole binary.
inline testing::RunResult RunSets(int size, testing::RankFn fn) {
  testing::RunOptions o;
  o.timeout = std::chrono::seconds(30);
  return RunRanks(size, std::move(fn), o);
}

inline constexpr DataType kAllTypes[] = {
    DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
    DataType::kInt8,    DataType::kUInt8,   DataType::kInt16,   DataType::kInt32,
    DataType::kInt64,   DataType::kBool};

inline std::string RanksText(const std::vector<int>& r) {
  std::string s = "[";
  for (size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  return s + "]";
}

// Fails unless `s` has `code` and its message contains every one of `parts`.
inline Status ExpectError(const std::string& what, const Status& s, StatusCode code,
                          const std::vector<std::string>& parts = {}) {
  if (s.code() != code) {
    return Internal(what + ": want " + Status::CodeName(code) + ", got " + s.ToString());
  }
  for (const std::string& p : parts) {
    if (!Contains(s.message(), p)) {
      return Internal(what + ": message lacks '" + p + "': " + s.message());
    }
  }
  return Status::OK();
}

inline int IndexOf(const std::vector<int>& v, int x) {
  auto it = std::find(v.begin(), v.end(), x);
  return it == v.end() ? -1 : static_cast<int>(it - v.begin());
}

// ---- Typed data: every value is a small integer, exact in every dtype ------------------------

inline void Put(DataType dt, void* p, size_t i, double v) {
  switch (dt) {
    case DataType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(p)[i] = v;
      break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToBFloat16(static_cast<float>(v));
      break;
    case DataType::kInt8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      break;
    case DataType::kUInt8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      break;
    case DataType::kInt16:
      static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v);
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
    case DataType::kBool:
      static_cast<uint8_t*>(p)[i] = v != 0 ? 1 : 0;
      break;
  }
}

inline double Get(DataType dt, const void* p, size_t i) {
  switch (dt) {
    case DataType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(p)[i];
    case DataType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::kInt8:
      return static_cast<const int8_t*>(p)[i];
    case DataType::kUInt8:
      return static_cast<const uint8_t*>(p)[i];
    case DataType::kInt16:
      return static_cast<const int16_t*>(p)[i];
    case DataType::kInt32:
      return static_cast<const int32_t*>(p)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DataType::kBool:
      return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}

// The value of element i on job rank `rank`: -3..3 (signed and floating), 0..3 (uint8), 0..1
// (bool). Sums and products over 4 ranks stay exact in every dtype (bfloat16: |x| <= 256).
inline double Val(DataType dt, int rank, int64_t i, int salt) {
  const int64_t h = rank * 7 + i * 3 + salt * 5 + (i / 7) * 2;
  switch (dt) {
    case DataType::kBool:
      return static_cast<double>(h % 2);
    case DataType::kUInt8:
      return static_cast<double>(h % 4);
    default:
      return static_cast<double>(h % 7 - 3);
  }
}

// A tensor's bytes, filled with Val(dt, rank, i, salt).
inline std::vector<char> Fill(DataType dt, int rank, int64_t count, int salt) {
  std::vector<char> b(std::max<size_t>(1, count * DataTypeSize(dt)));
  for (int64_t i = 0; i < count; ++i) Put(dt, b.data(), i, Val(dt, rank, i, salt));
  return b;
}

// x * factor as Scale (collectives/reduce.h) documents it, for the result of an average.
inline double ScaleRef(DataType dt, double x, double factor) {
  switch (dt) {
    case DataType::kFloat32:
      return static_cast<float>(x) * static_cast<float>(factor);
    case DataType::kFloat64:
      return x * factor;
    case DataType::kFloat16:
      return HalfToFloat(FloatToHalf(static_cast<float>(x) * static_cast<float>(factor)));
    case DataType::kBFloat16:
      return BFloat16ToFloat(FloatToBFloat16(static_cast<float>(x) * static_cast<float>(factor)));
    case DataType::kBool:
      return factor != 0 && x != 0 ? 1 : 0;
    default: {  // nearest integer, ties away from zero; (nearly) 1/k as a division by k
      const double k = std::round(1.0 / factor);
      if (factor > 0 && factor <= 0.5 && k <= 2147483648.0 &&
          std::fabs(factor * k - 1) <= 4.5 * 0x1p-52) {
        return static_cast<double>(std::roundl(static_cast<long double>(x) / k));
      }
      return static_cast<double>(
          std::roundl(static_cast<long double>(x) * static_cast<long double>(factor)));
    }
  }
}

// op over `xs` (one value per rank), exactly (bool: sum/max are or, min/product and).
inline double Reduce(DataType dt, ReduceOp op, const std::vector<double>& xs, double avg_factor) {
  if (dt == DataType::kBool) {
    bool any = false, all = true;
    for (double x : xs) {
      any = any || x != 0;
      all = all && x != 0;
    }
    return (op == ReduceOp::kSum || op == ReduceOp::kMax) ? any : all;
  }
  double sum = 0, mn = xs[0], mx = xs[0], prod = 1;
  for (double x : xs) {
    sum += x;
    mn = std::min(mn, x);
    mx = std::max(mx, x);
    prod *= x;
  }
  switch (op) {
    case ReduceOp::kSum:
      return sum;
    case ReduceOp::kAverage:
      return ScaleRef(dt, sum, avg_factor);
    case ReduceOp::kMin:
      return mn;
    case ReduceOp::kMax:
      return mx;
    case ReduceOp::kProduct:
      return prod;
    default:
      return NAN;
  }
}

// Compares `count` elements of dtype `dt` at `got` with `want`.
inline Status Same(const std::string& what, DataType dt, const void* got, size_t got_bytes,
                   const std::vector<double>& want) {
  const size_t n = got_bytes / DataTypeSize(dt);
  if (n != want.size()) {
    return Internal(what + ": " + std::to_string(n) + " elements, want " +
                    std::to_string(want.size()));
  }
  for (size_t i = 0; i < n; ++i) {
    const double g = Get(dt, got, i);
    if (!(g == want[i])) {
      return Internal(what + ": element " + std::to_string(i) + " is " + std::to_string(g) +
                      ", want " + std::to_string(want[i]));
    }
  }
  return Status::OK();
}

// Every rank's `v`, gathered in the global set (job rank order).
inline Status GatherAll(const std::string& name, int64_t v, std::vector<int64_t>* all) {
  Handle h = AllgatherAsync(name, Tensor{&v, DataType::kInt64, {1}});
  HVD_RETURN_IF_ERROR(h.Wait());
  const int64_t* p = static_cast<const int64_t*>(h.output_data());
  all->assign(p, p + h.output_bytes() / sizeof(int64_t));
  return Status::OK();
}

// The sets this rank belongs to, by increasing id (the global set first).
inline std::vector<int> MySets() {
  std::vector<int> ids;
  for (int id : ProcessSetIds()) {
    if (ProcessSetIncluded(id)) ids.push_back(id);
  }
  return ids;
}

// Ranks do different work in different sets: none may shut down (which stops every rank) before
// all are done.
inline Status BarrierAndShutdown() {
  HVD_RETURN_IF_ERROR(Barrier().WithContext("final barrier"));
  return Shutdown();
}

// Checks the query functions against `sets` (ids 1..n in order) on job rank `rank`.
inline Status CheckTable(int rank, const std::vector<std::vector<int>>& sets, int size) {
  std::vector<int> want_ids(sets.size() + 1);
  std::iota(want_ids.begin(), want_ids.end(), 0);
  HVD_RETURN_IF_ERROR(ExpectEqual("ProcessSetIds", ProcessSetIds(), want_ids));
  std::vector<int> all(size);
  std::iota(all.begin(), all.end(), 0);
  for (int id = 0; id <= static_cast<int>(sets.size()); ++id) {
    const std::vector<int>& members = id == 0 ? all : sets[id - 1];
    const std::string what = "set " + std::to_string(id);
    std::vector<int> got;
    HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &got));
    HVD_RETURN_IF_ERROR(ExpectEqual(what + " ranks", got, members));
    HVD_RETURN_IF_ERROR(Check(ProcessSetSize(id) == static_cast<int>(members.size()),
                              what + " size " + std::to_string(ProcessSetSize(id))));
    const int idx = IndexOf(members, rank);
    HVD_RETURN_IF_ERROR(Check(
        ProcessSetRank(id) == idx,
        what + " rank " + std::to_string(ProcessSetRank(id)) + ", want " + std::to_string(idx)));
    HVD_RETURN_IF_ERROR(Check(ProcessSetIncluded(id) == (idx >= 0), what + " included"));
  }
  const int unknown = static_cast<int>(sets.size()) + 5;
  HVD_RETURN_IF_ERROR(Check(ProcessSetRank(unknown) == -1 && ProcessSetSize(unknown) == -1 &&
                                !ProcessSetIncluded(unknown),
                            "an unknown set must answer -1/-1/false"));
  std::vector<int> none;
  HVD_RETURN_IF_ERROR(ExpectError("ProcessSetRanks(unknown)", ProcessSetRanks(unknown, &none),
                                  StatusCode::kNotFound, {std::to_string(unknown)}));
  return Status::OK();
}

// A sum allreduce in every set the rank belongs to, submitted at once; checks the sums.
inline Status SumInEverySet(int rank, const std::string& name) {
  struct Pending {
    int id;
    std::vector<int> members;
    std::vector<int64_t> v;
    Handle h;
  };
  std::deque<Pending> pending;
  for (int id : ProcessSetIds()) {
    if (!ProcessSetIncluded(id)) continue;
    Pending& p = pending.emplace_back();
    p.id = id;
    HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &p.members));
    p.v.assign(5, 0);
    for (int i = 0; i < 5; ++i) p.v[i] = (rank + 1) * 1000 + id * 10 + i;
    AllreduceOptions o = testing::Sum();
    o.process_set = id;
    Tensor t = MakeTensor(p.v.data(), DataType::kInt64, 5);
    p.h = AllreduceAsync(name, t, t, o);
  }
  for (Pending& p : pending) {
    HVD_RETURN_IF_ERROR(p.h.Wait().WithContext("sum in set " + std::to_string(p.id)));
    std::vector<int64_t> want(5, 0);
    for (int m : p.members) {
      for (int i = 0; i < 5; ++i) want[i] += (m + 1) * 1000 + p.id * 10 + i;
    }
    HVD_RETURN_IF_ERROR(ExpectEqual(name + " in set " + std::to_string(p.id), p.v, want));
  }
  return Status::OK();
}

}  // namespace hvd::testing::sets
