// Element types and reduction operations understood by every collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hvd {

// Values are part of the C ABI (hvd_dtype_t): never renumber.
enum class DataType : int {
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,   // IEEE binary16; reduced in float32
  kBFloat16 = 3,  // bfloat16; reduced in float32
  kInt8 = 4,
  kUInt8 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kInt16 = 8,
  // One byte per element. Reductions read any non-zero byte as true and write 0 or 1; sum and max
  // are logical or, min and product logical and (Horovod's and PyTorch's rule); average is
  // refused (collectives/reduce.h: CheckReduceDtype).
  kBool = 9,
};
inline constexpr int kNumDataTypes = 10;

// Values are part of the C ABI (hvd_reduce_op_t): never renumber.
enum class ReduceOp : int {
  kSum = 0,
  // Sum, then divided by the number of contributing ranks: floats times the double nearest 1/n;
  // integers the nearest integer to sum / n exactly, ties away from zero
  // (collectives/integer_scale.h), where Horovod truncates sum * double(1/n). Integer sums (and
  // products) wrap around in the element type, as in Horovod and PyTorch: an average of int8
  // values is of their int8 sum.
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
  // Adaptive summation (Maleki et al. 2020, Horovod's hvd.Adasum): floating-point allreduce only;
  // each tensor combined pairwise as (1 - a.b/2|a|^2) a + (1 - a.b/2|b|^2) b
  // (collectives/adasum.cc says in what order for any number of ranks).
  kAdasum = 5,
};
inline constexpr int kNumReduceOps = 6;

inline constexpr size_t DataTypeSize(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat64:
      return 8;
    case DataType::kFloat16:
      return 2;
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt8:
      return 1;
    case DataType::kUInt8:
      return 1;
    case DataType::kInt32:
      return 4;
    case DataType::kInt64:
      return 8;
    case DataType::kInt16:
      return 2;
    case DataType::kBool:
      return 1;
  }
  return 0;
}

inline constexpr std::string_view DataTypeName(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kInt8:
      return "int8";
    case DataType::kUInt8:
      return "uint8";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kInt16:
      return "int16";
    case DataType::kBool:
      return "bool";
  }
  return "invalid";
}

inline constexpr std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
    case ReduceOp::kAdasum:
      return "adasum";
  }
  return "invalid";
}

inline constexpr bool IsValid(DataType t) {
  return static_cast<int>(t) >= 0 && static_cast<int>(t) < kNumDataTypes;
}
inline constexpr bool IsValid(ReduceOp op) {
  return static_cast<int>(op) >= 0 && static_cast<int>(op) < kNumReduceOps;
}

}  // namespace hvd
