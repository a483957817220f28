// Element-wise kernels used by the collectives and the fusion buffer. Vectorized: float types,
// integers and bool by the compiler at -O3 over restrict pointers; float16/bfloat16 go through
// float32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hvd/status.h"
#include "hvd/types.h"

namespace hvd::runtime::collectives {

// dst[i] = dst[i] op src[i] for i < count. Integer sum and product wrap modulo 2^bits; float
// min/max propagate NaN (either operand NaN gives NaN); half types are combined in float32 and
// rounded to nearest even. bool: any non-zero byte is true; kSum and kMax are logical or, kMin and
// kProduct logical and; every result byte is 0 or 1. `src` may have any alignment (it may point
// into a shared-memory ring); `dst` is aligned to its element type. REQUIRES: dst and src do not
// overlap; op != kAverage (callers sum, then scale; kAverage is treated as kSum); op != kAdasum
// (not element-wise).
void ReduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);

// ReduceInto, and the result also written to `copy` (any alignment, overlapping neither): the
// ring forwards what it has just reduced without reading it back.
void ReduceIntoCopy(void* dst, const void* src, void* copy, size_t count, DataType dtype,
                    ReduceOp op);

// Out of place: dst[i] = a[i] op src[i], and copy = the result when not null. The bits of
// copying a into dst and then ReduceIntoCopy (which it does block by block, each block reduced
// while in cache), without a separate pass copying `a`: an out-of-place allreduce reads its input
// where it is. `a` may have any alignment; a == dst is ReduceIntoCopy. REQUIRES: as ReduceInto;
// otherwise dst, a, src and copy do not overlap.
void ReduceTo(void* dst, const void* a, const void* src, void* copy, size_t count, DataType dtype,
              ReduceOp op);

// Calls fn(first, n) for consecutive runs of `count` elements of `dtype`, each at most 8 KiB: the
// blocks ReduceTo (and stream_copy.h's ReduceToStreamed) reduce one at a time while they are in
// the L1 cache.
template <typename Fn>
void ForEachL1Block(size_t count, DataType dtype, Fn&& fn) {
  constexpr size_t kBlockBytes = 8 << 10;
  const size_t es = DataTypeSize(dtype);
  const size_t block = kBlockBytes / es > 0 ? kBlockBytes / es : 1;
  for (size_t i = 0; i < count; i += block) fn(i, count - i < block ? count - i : block);
}

// buf[i] *= factor. float32: x * (float)factor; float64: x * factor; half types: widened to
// float32, multiplied by (float)factor, rounded to nearest even. Integers: the nearest integer to
// x * factor, ties away from zero, saturated to the type's range (NaN gives 0); a factor within
// about 1e-15 (relative) of 1/k for a whole k (an average) divides by k exactly, others multiply
// in long double (integer_scale.h). bool: factor != 0 (NaN included, as a C++ or PyTorch conversion
// to bool has it) keeps each value, written as 0 or 1; factor == 0 makes every element false.
// Collectives scale by 1.0 / size for kAverage.
void Scale(void* buf, size_t count, DataType dtype, double factor);

// Whether `op` is defined on `dtype`: InvalidArgument for kAverage on bool (a mean of truth values
// is not a truth value), OK for every other valid pair. The API checks it before a collective is
// negotiated, so the kernels above never see an undefined pair.
Status CheckReduceDtype(DataType dtype, ReduceOp op);

// IEEE half <-> float32 (round to nearest even); bfloat16 <-> float32 (round to nearest even).
// Exact widening; narrowing overflows to Inf, keeps subnormals, and turns NaN into a quiet NaN
// of the same sign (bit-exact with x86 F16C for half).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

}  // namespace hvd::runtime::collectives
