#include "rendezvous/store_util.h"

#include <cstring>

#include "common/settings.h"

namespace hvd::runtime::rendezvous::internal {

Status WaitTimedOut(const std::string& store, int64_t timeout_ms,
                    const std::vector<std::string>& missing) {
  std::string m = store + ": timed out after " + std::to_string(timeout_ms) + " ms waiting for " +
                  std::to_string(missing.size()) + (missing.size() == 1 ? " key: " : " keys: ");
  for (size_t i = 0; i < missing.size(); ++i) {
    if (i > 0) m += ", ";
    m += "'" + missing[i] + "'";
  }
  return DeadlineExceeded(std::move(m));
}

Status ParseCounter(const std::string& store, std::string_view key, const std::string& text,
                    int64_t* out) {
  // ParseInt64 (strtoll) also takes leading whitespace and '+'; a counter must be plain digits.
  bool plain = !text.empty();
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (!(c >= '0' && c <= '9') && !(i == 0 && c == '-' && text.size() > 1)) plain = false;
  }
  if (plain && common::ParseInt64(text, out).ok()) return Status::OK();
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

std::string ErrnoText(int err) {
  const char* name = strerrorname_np(err);
  std::string s = strerror(err);
  if (name != nullptr) s += std::string(" (") + name + ")";
  return s;
}

}  // namespace hvd::runtime::rendezvous::internal
