#include "fusion/fusion_buffer.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "collectives/reduce.h"

namespace hvd::runtime::fusion {
namespace {

template <typename T>
void Fill(void* p, size_t n, T v) {
  std::fill_n(static_cast<T*>(p), n, v);
}

}  // namespace

BufferLayout::BufferLayout(std::vector<std::vector<size_t>> pieces, size_t element_bytes)
    : pieces_(std::move(pieces)), element_bytes_(element_bytes) {
  const int n = pieces_.empty() ? 0 : static_cast<int>(pieces_[0].size()) - 1;
  parts_.assign(n + 1, 0);
  for (const std::vector<size_t>& p : pieces_) {
    for (int s = 0; s < n; ++s) parts_[s + 1] += p[s + 1] - p[s];
  }
  for (int s = 0; s < n; ++s) parts_[s + 1] += parts_[s];
}

template <typename Fn>
void BufferLayout::ForEachPiece(Fn&& fn) const {
  const int n = static_cast<int>(parts_.size()) - 1;
  std::vector<size_t> cursor(parts_.begin(), parts_.end() - 1);
  for (size_t i = 0; i < pieces_.size(); ++i) {
    for (int s = 0; s < n; ++s) {
      const size_t len = pieces_[i][s + 1] - pieces_[i][s];
      fn(i, pieces_[i][s] * element_bytes_, cursor[s] * element_bytes_, len * element_bytes_);
      cursor[s] += len;
    }
  }
}

void BufferLayout::Pack(const std::vector<const void*>& inputs, DataType dtype, ReduceOp op,
                        double prescale, char* buf) const {
  ForEachPiece([&](size_t i, size_t from, size_t to, size_t bytes) {
    if (bytes == 0) return;
    if (inputs[i] != nullptr) {
      std::memcpy(buf + to, static_cast<const char*>(inputs[i]) + from, bytes);
      // Prescale real contributions only: a joined rank's identity must stay the identity.
      if (prescale != 1.0) collectives::Scale(buf + to, bytes / element_bytes_, dtype, prescale);
    } else {
      FillIdentity(buf + to, bytes / element_bytes_, dtype, op);
    }
  });
}

void BufferLayout::Unpack(const char* buf, const std::vector<void*>& outputs) const {
  ForEachPiece([&](size_t i, size_t to, size_t from, size_t bytes) {
    if (bytes == 0 || outputs[i] == nullptr) return;
    std::memcpy(static_cast<char*>(outputs[i]) + to, buf + from, bytes);
  });
}

void FillIdentity(void* buf, size_t count, DataType dtype, ReduceOp op) {
  // Adasum: a zero vector leaves the other operand unchanged (its coefficient stays 1).
  if (op == ReduceOp::kSum || op == ReduceOp::kAverage || op == ReduceOp::kAdasum) {
    std::memset(buf, 0, count * DataTypeSize(dtype));
    return;
  }
  auto pick = [&](auto lowest, auto highest, auto one) {
    using T = decltype(one);
    Fill<T>(buf, count, op == ReduceOp::kMin ? highest : op == ReduceOp::kMax ? lowest : one);
  };
  switch (dtype) {
    case DataType::kFloat32:
      pick(-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(), 1.0f);
      break;
    case DataType::kFloat64:
      pick(-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(), 1.0);
      break;
    case DataType::kFloat16:  // -inf, +inf, 1.0 in binary16
      pick(uint16_t{0xFC00}, uint16_t{0x7C00}, uint16_t{0x3C00});
      break;
    case DataType::kBFloat16:
      pick(uint16_t{0xFF80}, uint16_t{0x7F80}, uint16_t{0x3F80});
      break;
    case DataType::kInt8:
      pick(int8_t{-128}, int8_t{127}, int8_t{1});
      break;
    case DataType::kUInt8:
      pick(uint8_t{0}, uint8_t{255}, uint8_t{1});
      break;
    case DataType::kInt32:
      pick(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), int32_t{1});
      break;
    case DataType::kInt64:
      pick(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), int64_t{1});
      break;
    case DataType::kInt16:
      pick(std::numeric_limits<int16_t>::min(), std::numeric_limits<int16_t>::max(), int16_t{1});
      break;
    case DataType::kBool:  // max is or: false; min and product are and: true (sum: false, above)
      pick(uint8_t{0}, uint8_t{1}, uint8_t{1});
      break;
  }
}

}  // namespace hvd::runtime::fusion
