// float16 and bfloat16 bits to and from float32, bit-exact with x86's F16C (vcvtph2ps,
// vcvtps2ph with round-to-nearest-even): widening is exact; narrowing rounds to nearest even,
// overflows to Inf, keeps subnormals, and quiets NaN keeping its sign and top payload bits.
// Inline, for the reduction kernels' loops (reduce.cc); reduce.h exports them as HalfToFloat etc.
#pragma once

#include <bit>
#include <cstdint>

namespace hvd::runtime::collectives::internal {

inline __attribute__((always_inline)) float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    // Inf, or NaN quieted (vcvtph2ps sets the quiet bit too).
    bits = sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0u);
  } else if (exp != 0) {
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal half: normalize. The value is mant * 2^-24; shift the leading 1 to bit 10.
    int e = 127 - 15 + 1;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

inline __attribute__((always_inline)) uint16_t FloatToHalfBits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // Inf, or NaN: quiet it, keep the top payload bits
    return sign | (a == 0x7f800000u ? 0x7c00u : (0x7e00u | ((a >> 13) & 0x3ffu)));
  }
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 = halfway past 65504: Inf (tie->even)
  if (a >= 0x38800000u) {                       // >= 2^-14: normal half
    const uint32_t r = a - ((127u - 15u) << 23);
    return sign | static_cast<uint16_t>((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25 (half the smallest subnormal, a tie): zero
  // Subnormal half: value / 2^-24 rounded to nearest even. The carry into 0x400 yields the
  // smallest normal, which is the correct encoding.
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - (a >> 23);  // in [14, 24]
  uint32_t r = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
  return sign | static_cast<uint16_t>(r);
}

inline __attribute__((always_inline)) float BF16BitsToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline __attribute__((always_inline)) uint16_t FloatToBF16Bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;  // overflow rounds to Inf
  const uint32_t quiet = (x >> 16) | 0x40u;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

}  // namespace hvd::runtime::collectives::internal
