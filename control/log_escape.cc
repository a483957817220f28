#include "control/log_escape.h"

#include "base/hex.h"
#include "base/logging.h"

namespace hvd::control {

std::string LogEscape(std::string_view text, size_t max_bytes) {
  const size_t n = std::min(text.size(), max_bytes);
  std::string out;
  out.reserve(n + 16);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      default:
        break;
    }
    if (c < 0x20 || c >= 0x7f) {
      out += "\\x";
      base::AppendHexByte(c, &out);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > n) out += "...(" + std::to_string(text.size() - n) + " more bytes)";
  return out;
}

RateLimitedLog::RateLimitedLog(std::chrono::milliseconds interval, size_t max_keys)
    : interval_(interval), max_keys_(max_keys) {}

bool RateLimitedLog::Allow(const std::string& key, uint64_t* suppressed, Clock::time_point now) {
  base::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    if (now - it->second.last < interval_) {
      ++it->second.suppressed;
      return false;
    }
    *suppressed = it->second.suppressed;
    it->second = Entry{now, 0};
    return true;
  }
  // Many addresses: forget them all rather than grow; each costs one line again at most.
  if (entries_.size() >= max_keys_) entries_.clear();
  entries_.emplace(key, Entry{now, 0});
  *suppressed = 0;
  return true;
}

std::string PeerHost(const std::string& peer) { return peer.substr(0, peer.rfind(':')); }

void RateLimitedLog::Warn(const std::string& key, const std::string& line) {
  uint64_t suppressed = 0;
  if (!Allow(key, &suppressed)) return;
  if (suppressed == 0) {
    HVD_LOG(WARNING) << line;
  } else {
    HVD_LOG(WARNING) << line << " (and " << suppressed << " more from " << LogEscape(key)
                     << " since the previous line, not logged: at most one a "
                     << interval_.count() / 1000.0 << " s)";
  }
}

}  // namespace hvd::control
