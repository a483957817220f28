// Element-wise reduction kernels: ReduceInto (dst op= src), ReduceTo (dst = a op src) and Scale
// (buf *= factor).
//
// Vocabulary:
//   wrap      - integer sum and product are computed modulo 2^bits (in unsigned arithmetic, so
//               signed overflow is defined); the result is independent of reduction order.
//   NaN-propagating min/max - if either operand is NaN the result is NaN (torch.minimum's rule),
//               so the result does not depend on which rank's value arrives first.
//   half      - float16 and bfloat16: widened to float32 (exact), combined in float32, rounded
//               back to nearest-even. NaN stays NaN (quieted, payload truncated as F16C does) and
//               overflow rounds to Inf.
//   bool      - one byte per element, any non-zero byte true; sum and max are logical or, min and
//               product logical and, and every result is written as 0 or 1, so the bytes are the
//               same on every rank whatever the inputs' true bytes were.
//
// Performance: this file is compiled at -O3. float32/float64/integer/bool loops are simple loops
// over __restrict pointers, cloned for AVX2 and baseline x86-64 (target_clones: the loader picks
// one through an ifunc), so the compiler vectorizes each clone for its ISA. float16 uses F16C
// (vcvtph2ps/vcvtps2ph, 8 lanes) when the CPU has it, else a bit-exact scalar path; bfloat16
// conversions are integer arithmetic that the compiler vectorizes.
#include "collectives/reduce.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "collectives/half_bits.h"
#include "collectives/integer_scale.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HVD_X86 1
#define HVD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define HVD_X86 0
#define HVD_CLONES
#endif

#define HVD_ALWAYS_INLINE inline __attribute__((always_inline))

namespace hvd::runtime::collectives {
namespace {

using internal::BF16BitsToFloat;
using internal::FloatToBF16Bits;
using internal::FloatToHalfBits;
using internal::HalfBitsToFloat;

// ---- Operators ---------------------------------------------------------------------------------

// Integers are combined in an unsigned type at least as wide as unsigned int: narrower ones would
// promote to (signed) int, and 65535 * 65535 overflows int, which is undefined behaviour.
template <typename T>
using WrapUnsigned = std::common_type_t<std::make_unsigned_t<T>, unsigned>;

template <typename T>
HVD_ALWAYS_INLINE T WrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = WrapUnsigned<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <typename T>
HVD_ALWAYS_INLINE T WrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = WrapUnsigned<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

struct Sum {
  template <typename T>
  HVD_ALWAYS_INLINE T operator()(T a, T b) const {
    return WrapAdd(a, b);
  }
};
struct Product {
  template <typename T>
  HVD_ALWAYS_INLINE T operator()(T a, T b) const {
    return WrapMul(a, b);
  }
};
// `(b < a) ? b : a` keeps a when a is NaN; the second select returns b when b is NaN. For integers
// `b != b` folds to false. Vectorized, this is minps/maxps plus a blend.
struct Min {
  template <typename T>
  HVD_ALWAYS_INLINE T operator()(T a, T b) const {
    T r = (b < a) ? b : a;
    return (b != b) ? b : r;
  }
};
struct Max {
  template <typename T>
  HVD_ALWAYS_INLINE T operator()(T a, T b) const {
    T r = (a < b) ? b : a;
    return (b != b) ? b : r;
  }
};

// bool, on its bytes: any non-zero byte is true; the result is always 0 or 1.
struct Or {
  HVD_ALWAYS_INLINE uint8_t operator()(uint8_t a, uint8_t b) const {
    return static_cast<uint8_t>((a | b) != 0);
  }
};
struct And {
  HVD_ALWAYS_INLINE uint8_t operator()(uint8_t a, uint8_t b) const {
    return static_cast<uint8_t>((a != 0) & (b != 0));
  }
};

// Element i of an array at any alignment (src may point into a shared-memory ring at any byte
// offset). The compiler turns these into plain unaligned vector loads and stores.
template <typename T>
HVD_ALWAYS_INLINE T LoadAt(const char* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
HVD_ALWAYS_INLINE void StoreAt(char* p, size_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

// dst op= src, and copy = the result when `copy` is given (two loops, each vectorized).
template <typename T, typename Op>
HVD_ALWAYS_INLINE void Loop(T* __restrict dst, const char* __restrict src, char* __restrict copy,
                            size_t n, Op op) {
  if (copy == nullptr) {
    for (size_t i = 0; i < n; ++i) dst[i] = op(dst[i], LoadAt<T>(src, i));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const T r = op(dst[i], LoadAt<T>(src, i));
    dst[i] = r;
    StoreAt<T>(copy, i, r);
  }
}

template <typename Loop>
HVD_ALWAYS_INLINE void DispatchOp(ReduceOp op, Loop loop) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:  // callers scale afterwards; summing is the useful fallback
    case ReduceOp::kAdasum:   // never reaches a kernel (AdasumAllreduce combines whole tensors)
      loop(Sum{});
      return;
    case ReduceOp::kProduct:
      loop(Product{});
      return;
    case ReduceOp::kMin:
      loop(Min{});
      return;
    case ReduceOp::kMax:
      loop(Max{});
      return;
  }
}

// kSum and kMax are logical or, kMin and kProduct logical and: the PyTorch/Horovod meaning, and
// the only one in which sum (0/1 saturating) and max agree, as do min and product.
template <typename Loop>
HVD_ALWAYS_INLINE void DispatchBoolOp(ReduceOp op, Loop loop) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:  // refused by CheckReduceDtype; or is what kSum would give
    case ReduceOp::kAdasum:   // never reaches a kernel (AdasumAllreduce combines whole tensors)
    case ReduceOp::kMax:
      loop(Or{});
      return;
    case ReduceOp::kMin:
    case ReduceOp::kProduct:
      loop(And{});
      return;
  }
}

// One cloned entry point per element type (target_clones does not mix well with templates).
#define HVD_DEFINE_REDUCE(NAME, T)                                                           \
  HVD_CLONES void NAME(T* __restrict dst, const char* __restrict src, char* __restrict copy, \
                       size_t n, ReduceOp op) {                                              \
    DispatchOp(op, [&](auto o) { Loop(dst, src, copy, n, o); });                             \
  }
HVD_DEFINE_REDUCE(ReduceF32, float)
HVD_DEFINE_REDUCE(ReduceF64, double)
HVD_DEFINE_REDUCE(ReduceI8, int8_t)
HVD_DEFINE_REDUCE(ReduceU8, uint8_t)
HVD_DEFINE_REDUCE(ReduceI16, int16_t)
HVD_DEFINE_REDUCE(ReduceI32, int32_t)
HVD_DEFINE_REDUCE(ReduceI64, int64_t)
#undef HVD_DEFINE_REDUCE

HVD_CLONES void ReduceBool(uint8_t* __restrict dst, const char* __restrict src,
                           char* __restrict copy, size_t n, ReduceOp op) {
  DispatchBoolOp(op, [&](auto o) { Loop(dst, src, copy, n, o); });
}

HVD_CLONES void ScaleF32(float* __restrict buf, size_t n, float f) {
  for (size_t i = 0; i < n; ++i) buf[i] *= f;
}
HVD_CLONES void ScaleF64(double* __restrict buf, size_t n, double f) {
  for (size_t i = 0; i < n; ++i) buf[i] *= f;
}

// bool: x * factor read as a bool, as C++ and PyTorch convert a number to bool: a non-zero factor
// (NaN included) keeps the value, written as 0 or 1; a zero factor makes every element false.
HVD_CLONES void ScaleBool(uint8_t* __restrict buf, size_t n, double factor) {
  if (factor == 0.0) {
    std::memset(buf, 0, n);
    return;
  }
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<uint8_t>(buf[i] != 0);
}

template <typename Op>
HVD_ALWAYS_INLINE void HalfLoopScalar(uint16_t* __restrict dst, const char* __restrict src,
                                      char* __restrict copy, size_t n, Op op) {
  for (size_t i = 0; i < n; ++i) {
    dst[i] =
        FloatToHalfBits(op(HalfBitsToFloat(dst[i]), HalfBitsToFloat(LoadAt<uint16_t>(src, i))));
    if (copy != nullptr) StoreAt<uint16_t>(copy, i, dst[i]);
  }
}

template <typename Op>
HVD_ALWAYS_INLINE void BF16Loop(uint16_t* __restrict dst, const char* __restrict src,
                                char* __restrict copy, size_t n, Op op) {
  auto one = [&](size_t i) {
    return FloatToBF16Bits(op(BF16BitsToFloat(dst[i]), BF16BitsToFloat(LoadAt<uint16_t>(src, i))));
  };
  if (copy == nullptr) {
    for (size_t i = 0; i < n; ++i) dst[i] = one(i);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const uint16_t r = one(i);
    dst[i] = r;
    StoreAt<uint16_t>(copy, i, r);
  }
}

void ReduceHalfScalar(uint16_t* dst, const char* src, char* copy, size_t n, ReduceOp op) {
  DispatchOp(op, [&](auto o) { HalfLoopScalar(dst, src, copy, n, o); });
}

HVD_CLONES void ReduceBF16(uint16_t* __restrict dst, const char* __restrict src,
                           char* __restrict copy, size_t n, ReduceOp op) {
  DispatchOp(op, [&](auto o) { BF16Loop(dst, src, copy, n, o); });
}

HVD_CLONES void ScaleBF16(uint16_t* __restrict buf, size_t n, float f) {
  for (size_t i = 0; i < n; ++i) buf[i] = FloatToBF16Bits(BF16BitsToFloat(buf[i]) * f);
}

#if HVD_X86
// F16C: 8 halves per step through __m256. vcvtps2ph with round-to-nearest-even matches
// FloatToHalfBits bit for bit, and VecOp matches the scalar operators (same select order for
// min/max), so the scalar tail and the vector body agree.
#define HVD_F16C __attribute__((target("avx,f16c")))

HVD_F16C HVD_ALWAYS_INLINE __m256 VecOp(Sum, __m256 a, __m256 b) {
  return _mm256_add_ps(a, b);
}
HVD_F16C HVD_ALWAYS_INLINE __m256 VecOp(Product, __m256 a, __m256 b) {
  return _mm256_mul_ps(a, b);
}
HVD_F16C HVD_ALWAYS_INLINE __m256 VecOp(Min, __m256 a, __m256 b) {
  __m256 r = _mm256_min_ps(b, a);  // (b < a) ? b : a
  return _mm256_blendv_ps(r, b, _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
}
HVD_F16C HVD_ALWAYS_INLINE __m256 VecOp(Max, __m256 a, __m256 b) {
  __m256 r = _mm256_max_ps(b, a);  // (b > a) ? b : a
  return _mm256_blendv_ps(r, b, _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
}

template <typename Op>
HVD_F16C HVD_ALWAYS_INLINE void HalfLoopF16C(uint16_t* dst, const char* src, char* copy, size_t n,
                                             Op op) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dst + i)));
    __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i)));
    __m128i r = _mm256_cvtps_ph(VecOp(op, a, b), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), r);
    if (copy != nullptr) _mm_storeu_si128(reinterpret_cast<__m128i*>(copy + 2 * i), r);
  }
  HalfLoopScalar(dst + i, src + 2 * i, copy != nullptr ? copy + 2 * i : nullptr, n - i, op);
}

HVD_F16C void ReduceHalfF16C(uint16_t* dst, const char* src, char* copy, size_t n, ReduceOp op) {
  DispatchOp(op, [&](auto o) HVD_F16C { HalfLoopF16C(dst, src, copy, n, o); });
}

HVD_F16C void ScaleHalfF16C(uint16_t* buf, size_t n, float f) {
  const __m256 fv = _mm256_set1_ps(f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(buf + i)));
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(buf + i),
        _mm256_cvtps_ph(_mm256_mul_ps(a, fv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) buf[i] = FloatToHalfBits(HalfBitsToFloat(buf[i]) * f);
}

bool HaveF16C() {
  static const bool have = [] {
    __builtin_cpu_init();
    // F16C from CPUID leaf 1 (ECX bit 29): clang before 15 rejects __builtin_cpu_supports("f16c"),
    // and the fuzz build (scripts/fuzz.sh) compiles this file with clang 14.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
           (ecx & bit_F16C) != 0;
  }();
  return have;
}
#endif  // HVD_X86

void ReduceHalf(uint16_t* dst, const char* src, char* copy, size_t n, ReduceOp op) {
#if HVD_X86
  if (HaveF16C()) return ReduceHalfF16C(dst, src, copy, n, op);
#endif
  ReduceHalfScalar(dst, src, copy, n, op);
}

void ScaleHalf(uint16_t* buf, size_t n, float f) {
#if HVD_X86
  if (HaveF16C()) return ScaleHalfF16C(buf, n, f);
#endif
  for (size_t i = 0; i < n; ++i) buf[i] = FloatToHalfBits(HalfBitsToFloat(buf[i]) * f);
}

}  // namespace

void ReduceIntoCopy(void* dst, const void* src, void* copy, size_t count, DataType dtype,
                    ReduceOp op) {
  if (count == 0) return;
  const char* s = static_cast<const char*>(src);
  char* c = static_cast<char*>(copy);
  switch (dtype) {
    case DataType::kFloat32:
      return ReduceF32(static_cast<float*>(dst), s, c, count, op);
    case DataType::kFloat64:
      return ReduceF64(static_cast<double*>(dst), s, c, count, op);
    case DataType::kFloat16:
      return ReduceHalf(static_cast<uint16_t*>(dst), s, c, count, op);
    case DataType::kBFloat16:
      return ReduceBF16(static_cast<uint16_t*>(dst), s, c, count, op);
    case DataType::kInt8:
      return ReduceI8(static_cast<int8_t*>(dst), s, c, count, op);
    case DataType::kUInt8:
      return ReduceU8(static_cast<uint8_t*>(dst), s, c, count, op);
    case DataType::kInt32:
      return ReduceI32(static_cast<int32_t*>(dst), s, c, count, op);
    case DataType::kInt64:
      return ReduceI64(static_cast<int64_t*>(dst), s, c, count, op);
    case DataType::kInt16:
      return ReduceI16(static_cast<int16_t*>(dst), s, c, count, op);
    case DataType::kBool:
      return ReduceBool(static_cast<uint8_t*>(dst), s, c, count, op);
  }
}

void ReduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  ReduceIntoCopy(dst, src, nullptr, count, dtype, op);
}

void ReduceTo(void* dst, const void* a, const void* src, void* copy, size_t count, DataType dtype,
              ReduceOp op) {
  if (a == dst) return ReduceIntoCopy(dst, src, copy, count, dtype, op);
  // Block by block: `a` copied into dst, then reduced there by the in-place kernel while the
  // block is in the L1 cache. Memory sees one read of `a` and one write of dst, as a three-operand
  // loop would, and the bits are the in-place kernel's: a loop computing a + src is free to add
  // src + a instead, and then a sum of two NaNs keeps the other NaN's payload, which would make
  // ranks that reduce in place and out of place disagree.
  const size_t es = DataTypeSize(dtype);
  char* d = static_cast<char*>(dst);
  const char* x = static_cast<const char*>(a);
  const char* s = static_cast<const char*>(src);
  char* c = static_cast<char*>(copy);
  ForEachL1Block(count, dtype, [&](size_t first, size_t n) {
    const size_t at = first * es;
    std::memcpy(d + at, x + at, n * es);
    ReduceIntoCopy(d + at, s + at, c != nullptr ? c + at : nullptr, n, dtype, op);
  });
}

void Scale(void* buf, size_t count, DataType dtype, double factor) {
  if (count == 0) return;
  switch (dtype) {
    case DataType::kFloat32:
      return ScaleF32(static_cast<float*>(buf), count, static_cast<float>(factor));
    case DataType::kFloat64:
      return ScaleF64(static_cast<double*>(buf), count, factor);
    case DataType::kFloat16:
      return ScaleHalf(static_cast<uint16_t*>(buf), count, static_cast<float>(factor));
    case DataType::kBFloat16:
      return ScaleBF16(static_cast<uint16_t*>(buf), count, static_cast<float>(factor));
    case DataType::kInt8:
      return ScaleIntegers(static_cast<int8_t*>(buf), count, factor);
    case DataType::kUInt8:
      return ScaleIntegers(static_cast<uint8_t*>(buf), count, factor);
    case DataType::kInt32:
      return ScaleIntegers(static_cast<int32_t*>(buf), count, factor);
    case DataType::kInt64:
      return ScaleIntegers(static_cast<int64_t*>(buf), count, factor);
    case DataType::kInt16:
      return ScaleIntegers(static_cast<int16_t*>(buf), count, factor);
    case DataType::kBool:
      return ScaleBool(static_cast<uint8_t*>(buf), count, factor);
  }
}

Status CheckReduceDtype(DataType dtype, ReduceOp op) {
  if (dtype == DataType::kBool && op == ReduceOp::kAverage) {
    return InvalidArgument(
        "average is not defined for bool tensors; use Sum (logical or) or Min (logical and)");
  }
  return Status::OK();
}

float HalfToFloat(uint16_t h) {
  return HalfBitsToFloat(h);
}
uint16_t FloatToHalf(float f) {
  return FloatToHalfBits(f);
}
float BFloat16ToFloat(uint16_t b) {
  return BF16BitsToFloat(b);
}
uint16_t FloatToBFloat16(float f) {
  return FloatToBF16Bits(f);
}

}  // namespace hvd::runtime::collectives
