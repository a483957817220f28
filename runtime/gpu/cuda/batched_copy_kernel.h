// The batched copy's plan and per-thread work, shared by the CUDA kernel (batched_copy.cu) and a
// host emulation (tests/gpu/batched_copy_plan_test.cc), so that the indexing (heads, vectors,
// tails, blocks) and the integer rounding are checked on machines without a GPU too.
//
// Work split: a segment's body is cut into units (16, 8, 4, 2 or 1 bytes: the widest its source
// and destination share, never narrower than an element) and each block takes kUnitsPerBlock
// consecutive units, so a 64 MiB segment spreads over thousands of blocks and a 64-element one
// takes one. Each thread loads its kUnroll units before storing any, which keeps enough bytes in
// flight to reach the device's copy bandwidth. The unaligned head (before the first whole unit of
// the destination) is done by the segment's first block, the tail by its last, element by element.
#pragma once

#include <math.h>
#include <vector_types.h>  // uint4, uint2: host-usable CUDA header

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "collectives/integer_scale.h"

#ifdef __CUDACC__
#define HVD_HD __host__ __device__ __forceinline__
#else
#define HVD_HD inline
#endif
#ifdef __CUDA_ARCH__  // nvcc's device pass; the host compiler would warn about the pragma
#define HVD_UNROLL _Pragma("unroll")
#else
#define HVD_UNROLL
#endif

namespace hvd::runtime::gpu::cuda {

inline constexpr int kThreads = 256;
inline constexpr int kUnroll = 4;
inline constexpr uint64_t kUnitsPerBlock = uint64_t{kThreads} * kUnroll;

// One segment as the kernel reads it (built on the host, uploaded in one copy).
struct Entry {
  const char* src;
  char* dst;
  uint64_t count;        // elements (bytes on the copy path)
  uint64_t units;        // whole units in the body
  uint64_t first_block;  // this segment's first block in the grid
  uint32_t head;         // elements before the body (to reach a unit-aligned dst)
  uint32_t unit_bytes;   // 16, 8, 4, 2 or 1
};

HVD_HD uint64_t BlocksOf(const Entry& s) {
  return s.units == 0 ? 1 : (s.units + kUnitsPerBlock - 1) / kUnitsPerBlock;
}

// The widest unit (16 bytes down to one element) in which both pointers move together.
inline uint32_t UnitBytes(uintptr_t src, uintptr_t dst, size_t elem) {
  const uintptr_t diff = src ^ dst;
  uint32_t unit = 16;
  while (unit > elem && (diff & (unit - 1)) != 0) unit >>= 1;
  return unit;
}

// Fills `e` for `count` elements of `elem` bytes (1 on the copy path) from src to dst, its blocks
// starting at `first_block`; returns the number of blocks it takes.
inline uint64_t PlanEntry(const void* src, void* dst, uint64_t count, size_t elem,
                          uint64_t first_block, Entry* e) {
  const auto s = reinterpret_cast<uintptr_t>(src);
  const auto d = reinterpret_cast<uintptr_t>(dst);
  e->src = static_cast<const char*>(src);
  e->dst = static_cast<char*>(dst);
  e->count = count;
  e->unit_bytes = UnitBytes(s, d, elem);
  const uint64_t per_unit = e->unit_bytes / elem;
  uint64_t head = ((e->unit_bytes - d % e->unit_bytes) % e->unit_bytes) / elem;
  if (head > count) head = count;
  e->head = static_cast<uint32_t>(head);
  e->units = (count - head) / per_unit;
  e->first_block = first_block;
  return BlocksOf(*e);
}

// The entry whose blocks include `block`: the last with first_block <= block.
HVD_HD int SegmentOf(const Entry* table, int n, uint64_t block) {
  int lo = 0;
  int hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table[mid].first_block <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// ---- element operations ------------------------------------------------------------------------

struct CopyOp {
  template <typename T>
  HVD_HD T operator()(T x) const {
    return x;
  }
};

struct ScaleF32 {
  float f;
  HVD_HD float operator()(float x) const { return x * f; }
};

struct ScaleF64 {
  double f;
  HVD_HD double operator()(double x) const { return x * f; }
};

// round(x * f), ties away from zero, saturated to T; NaN gives 0: collectives::Scale's rule. A
// factor within about 1e-15 (relative) of 1/k (k = collectives::ExactDivisor(f), an average)
// divides by k exactly, as the host does (collectives/integer_scale.h). Other factors: the host
// computes in long double; here x * f is formed exactly as p + rest (fma gives the product's
// rounding error; an int64 beyond 2^53 is split so that each part is exact in a double), so the
// result is the exactly rounded one, which the host's agrees with for every practical factor.
template <typename T>
struct ScaleInt {
  double f;
  long long k;  // ExactDivisor(f): 0, or the whole k whose reciprocal f (nearly) is
  HVD_HD T operator()(T x) const {
    if (k != 0) return static_cast<T>(collectives::RoundedQuotient(static_cast<long long>(x), k));
    constexpr double kTwo63 = 9223372036854775808.0;
    constexpr long long kMin = static_cast<long long>(std::numeric_limits<T>::min());
    constexpr long long kMax = static_cast<long long>(std::numeric_limits<T>::max());
    const long long xi = static_cast<long long>(x);
    double hi = static_cast<double>(xi);
    double lo = 0.0;
    if (xi > (1LL << 53) || xi < -(1LL << 53)) {
      const long long h = xi & ~0x7ffLL;  // <= 53 significant bits: exact in a double
      hi = static_cast<double>(h);
      lo = static_cast<double>(xi - h);  // 0..2047
    }
    const double p = hi * f;
    if (p != p) return T(0);  // NaN
    if (fabs(p) == INFINITY) return p > 0 ? T(kMax) : T(kMin);
    const double rest = fma(hi, f, -p) + lo * f;
    const double approx = p + rest;
    if (approx != approx) return T(0);
    // Surely out of range: saturate (these bounds are exact doubles for every T).
    if (p >= kTwo63 || approx >= static_cast<double>(kMax) + 1.0) return T(kMax);
    if (p <= -kTwo63 || approx <= static_cast<double>(kMin) - 1.0) return T(kMin);
#ifdef __CUDA_ARCH__
    const long long r = __double2ll_rn(p);
#else
    const long long r = llrint(p);
#endif
    const double frac = (p - static_cast<double>(r)) + rest;  // p - r is exact
    const double whole = floor(frac);
    const double d = frac - whole;
    __int128 t = static_cast<__int128>(r) + static_cast<long long>(whole);
    if (d > 0.5 || (d == 0.5 && t >= 0)) t += 1;  // the tie goes away from zero
    if (t > kMax) return T(kMax);
    if (t < kMin) return T(kMin);
    return static_cast<T>(t);
  }
};

// ---- one thread's share of one block ----------------------------------------------------------

template <int kBytes>
struct Vec;
template <>
struct Vec<16> {
  using type = uint4;
};
template <>
struct Vec<8> {
  using type = uint2;
};
template <>
struct Vec<4> {
  using type = uint32_t;
};
template <>
struct Vec<2> {
  using type = uint16_t;
};
template <>
struct Vec<1> {
  using type = uint8_t;
};

template <typename T, typename V, typename Op>
HVD_HD V ApplyVec(V v, const Op& op) {
  if constexpr (std::is_same_v<Op, CopyOp>) {
    return v;
  } else {
    constexpr int kN = sizeof(V) / sizeof(T);
    T e[kN];
    memcpy(e, &v, sizeof(V));
    HVD_UNROLL
    for (int i = 0; i < kN; ++i) e[i] = op(e[i]);
    memcpy(&v, e, sizeof(V));
    return v;
  }
}

template <typename T, int kUnitBytes, typename Op>
HVD_HD void Body(const Entry& s, uint64_t block, unsigned thread, const Op& op) {
  using V = typename Vec<kUnitBytes>::type;
  const V* src = reinterpret_cast<const V*>(s.src + uint64_t{s.head} * sizeof(T));
  V* dst = reinterpret_cast<V*>(s.dst + uint64_t{s.head} * sizeof(T));
  const uint64_t first = block * kUnitsPerBlock + thread;
  V v[kUnroll] = {};  // each element is written before it is read; {} quiets g++
  HVD_UNROLL
  for (int k = 0; k < kUnroll; ++k) {
    const uint64_t i = first + static_cast<uint64_t>(k) * kThreads;
    if (i < s.units) v[k] = src[i];
  }
  HVD_UNROLL
  for (int k = 0; k < kUnroll; ++k) {
    const uint64_t i = first + static_cast<uint64_t>(k) * kThreads;
    if (i < s.units) dst[i] = ApplyVec<T>(v[k], op);
  }
}

// What thread `thread` of the segment's block `block` copies: its units of the body, and its
// element of the head (first block) or the tail (last block).
template <typename T, typename Op>
HVD_HD void CopyThread(const Entry& s, uint64_t block, unsigned thread, const Op& op) {
  switch (s.unit_bytes) {
    case 16:
      if constexpr (16 % sizeof(T) == 0) Body<T, 16>(s, block, thread, op);
      break;
    case 8:
      if constexpr (8 % sizeof(T) == 0) Body<T, 8>(s, block, thread, op);
      break;
    case 4:
      if constexpr (sizeof(T) <= 4) Body<T, 4>(s, block, thread, op);
      break;
    case 2:
      if constexpr (sizeof(T) <= 2) Body<T, 2>(s, block, thread, op);
      break;
    default:
      if constexpr (sizeof(T) == 1) Body<T, 1>(s, block, thread, op);
      break;
  }
  const T* src = reinterpret_cast<const T*>(s.src);
  T* dst = reinterpret_cast<T*>(s.dst);
  if (block == 0 && thread < s.head) dst[thread] = op(src[thread]);
  if (block == BlocksOf(s) - 1) {
    const uint64_t i = s.head + s.units * (s.unit_bytes / sizeof(T)) + thread;
    if (i < s.count) dst[i] = op(src[i]);
  }
}

}  // namespace hvd::runtime::gpu::cuda
