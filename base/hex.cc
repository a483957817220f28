#include "base/hex.h"

namespace hvd::base {
namespace {

constexpr char kLower[] = "0123456789abcdef";
constexpr char kUpper[] = "0123456789ABCDEF";

}  // namespace

void AppendHexByte(uint8_t byte, std::string* out, bool upper) {
  const char* digits = upper ? kUpper : kLower;
  out->push_back(digits[byte >> 4]);
  out->push_back(digits[byte & 0xf]);
}

std::string Hex(uint64_t v, int min_digits) {
  std::string reversed;
  do {
    reversed.push_back(kLower[v & 0xf]);
    v >>= 4;
  } while (v != 0);
  while (static_cast<int>(reversed.size()) < min_digits) reversed.push_back('0');
  return std::string(reversed.rbegin(), reversed.rend());
}

}  // namespace hvd::base
