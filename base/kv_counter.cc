#include "base/kv_counter.h"

#include "base/settings.h"

namespace hvd::base {

Status ParseCounter(const std::string& store, std::string_view key, const std::string& text,
                    int64_t* out) {
  // ParseInt64 (strtoll) also takes leading whitespace and '+'; a counter must be plain digits.
  bool plain = !text.empty();
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (!(c >= '0' && c <= '9') && !(i == 0 && c == '-' && text.size() > 1)) plain = false;
  }
  if (plain && ParseInt64(text, out).ok()) return Status::OK();
  return InvalidArgument(store + ": Add on key '" + std::string(key) + "' whose value '" + text +
                         "' is not a decimal int64");
}

Status AddCounter(const std::string& store, std::string_view key, int64_t value, int64_t delta,
                  int64_t* sum) {
  if (__builtin_add_overflow(value, delta, sum)) {
    return InvalidArgument(store + ": Add on key '" + std::string(key) + "' overflows int64 (" +
                           std::to_string(value) + " + " + std::to_string(delta) + ")");
  }
  return Status::OK();
}

}  // namespace hvd::base
