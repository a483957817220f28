// The fusion buffer's layout and the copies into and out of it.
//
// The buffer is part-major. Each tensor of a batch is cut by collectives::AllreduceLayout(its
// element count) into the allreduce's parts, and part s of the buffer holds piece s of every
// tensor, in batch order. An element thus sits in the same part (and is reduced in the same order)
// whether its tensor runs alone or fused, which makes fused and unfused results bit-identical.
#pragma once

#include <cstddef>
#include <vector>

#include "hvd/types.h"

namespace hvd::runtime::fusion {

class BufferLayout {
 public:
  // `pieces[i]`: tensor i's piece boundaries in elements (AllreduceLayout of its count; every
  // tensor of a batch has the same number of pieces). `element_bytes`: the batch dtype's size.
  BufferLayout(std::vector<std::vector<size_t>> pieces, size_t element_bytes);

  // Part boundaries of the whole buffer, in elements: what collectives::AllreduceParts takes.
  const std::vector<size_t>& parts() const { return parts_; }
  size_t elements() const { return parts_.back(); }
  size_t bytes() const { return elements() * element_bytes_; }

  // Copies tensor i's `inputs[i]` into its pieces of `buf` (bytes() long), scaled by `prescale`;
  // a null input (a joined rank's) is filled with the identity of `op` instead, unscaled, so that
  // it does not change the result (1 for a product, +inf for a min whatever the scale's sign).
  void Pack(const std::vector<const void*>& inputs, DataType dtype, ReduceOp op, double prescale,
            char* buf) const;
  // Copies tensor i's pieces of `buf` to `outputs[i]`; a null output is skipped.
  void Unpack(const char* buf, const std::vector<void*>& outputs) const;

 private:
  // Calls fn(i, offset in tensor i, offset in the buffer, bytes) for every piece, in byte units.
  template <typename Fn>
  void ForEachPiece(Fn&& fn) const;

  std::vector<std::vector<size_t>> pieces_;
  size_t element_bytes_;
  std::vector<size_t> parts_;
};

// Fills `count` elements at `buf` with the identity of `op`: what a joined rank contributes so
// that it does not change the result (zeros for sum, average and Adasum).
void FillIdentity(void* buf, size_t count, DataType dtype, ReduceOp op);

}  // namespace hvd::runtime::fusion
