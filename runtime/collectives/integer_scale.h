// How integers are scaled (an average's 1/size, prescale and postscale factors): the nearest
// integer to x * factor, ties away from zero, saturated to the type's range; NaN gives 0.
//
// An integer tensor's average is its sum times 1/n, and the double nearest 1/n is not 1/n: the
// product misses ties (6 ranks, sum 3: 3 x double(1/6) is just below or above 0.5) and, for large
// sums, can land on the wrong integer. Dividing the sum by n is exact. A factor within about
// 1e-15 (relative) of 1/k for a whole k is therefore applied as a division by k, any other factor
// as a product: that covers an average's 1/size (the double nearest 1/n), a postscale of 1/k, and
// both at once (postscale / size, two roundings: (1/3) / 11 is 1 ulp from 1/33). For such a
// factor the product and the division give the same integers but at ties and for magnitudes from
// about 2^48, where the product's error reaches a rounding boundary and the division is right.
// RoundedQuotient is shared by the host (reduce.cc: Scale) and the GPU's batched copy
// (gpu/cuda/batched_copy_kernel.h), and both take k from ExactDivisor on the host, so both give
// the same integers.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#ifdef __CUDACC__
#define HVD_DIVISOR_HD __host__ __device__ __forceinline__
#else
#define HVD_DIVISOR_HD inline
#endif

namespace hvd::runtime::collectives {

// k when factor x k is 1 within 4.5 x 2^-52 (about 1e-15: 5 to 9 ulps of 1/k) for a whole k in
// [2, 2^31]; 0 otherwise (also for NaN, zero, negative factors and factors above 1/2, which are
// applied as products). Neighbouring reciprocals are at least 2^-31 apart relatively, so no
// factor is near two of them.
inline int64_t ExactDivisor(double factor) {
  if (!(factor > 0.0 && factor <= 0.5)) return 0;
  const double inverse = 1.0 / factor;
  if (!(inverse <= 2147483648.5)) return 0;
  const int64_t k = std::llround(inverse);
  // An average with a postscale rounds twice (<= 2 ulps); the product adds at most 1/2 ulp of 1.
  return std::fabs(factor * static_cast<double>(k) - 1.0) <= 4.5 * 0x1p-52 ? k : 0;
}

// x / k rounded to the nearest integer, ties away from zero. REQUIRES: k >= 2. The result's
// magnitude is at most |x|, so it fits the type x came from.
HVD_DIVISOR_HD int64_t RoundedQuotient(int64_t x, int64_t k) {
  const int64_t q = x / k;  // truncated toward zero
  const int64_t r = x % k;  // x's sign, |r| < k <= 2^31: 2|r| cannot overflow
  const int64_t twice = 2 * (r < 0 ? -r : r);
  if (twice < k) return q;
  return x < 0 ? q - 1 : q + 1;
}

// buf[i] scaled by `factor` as above, on the host. Products are computed in long double, whose
// 64-bit mantissa holds every int64 exactly. Not vectorized: averaging integer tensors is rare
// and correctness matters more here.
template <typename T>
void ScaleIntegers(T* buf, size_t n, double factor) {
  if (const int64_t k = ExactDivisor(factor); k != 0) {
    for (size_t i = 0; i < n; ++i) buf[i] = static_cast<T>(RoundedQuotient(buf[i], k));
    return;
  }
  const long double f = factor;
  constexpr long double lo = static_cast<long double>(std::numeric_limits<T>::min());
  constexpr long double hi = static_cast<long double>(std::numeric_limits<T>::max());
  for (size_t i = 0; i < n; ++i) {
    const long double v = std::round(static_cast<long double>(buf[i]) * f);
    if (std::isnan(v)) {
      buf[i] = 0;
    } else if (v <= lo) {
      buf[i] = std::numeric_limits<T>::min();
    } else if (v >= hi) {
      buf[i] = std::numeric_limits<T>::max();
    } else {
      buf[i] = static_cast<T>(v);
    }
  }
}

}  // namespace hvd::runtime::collectives
