// Logging what clients send, safely: a peer that controls a host name, a job name, a key or a
// token can put newlines and terminal escapes into them, forging log lines or rewriting an
// operator's terminal; and a peer that fails on purpose can flood the log. Two helpers:
//
//   HVD_LOG(INFO) << "agent on " << LogEscape(host) << " registered";
//   static RateLimitedLog refusals;  // one line per peer per 10 s, with a count of the others
//   refusals.Warn(peer, "REST: wrong bearer token from " + peer);
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "base/mutex.h"
#include "base/thread_annotations.h"

namespace hvd::control {

// `text` fit for one log line: printable ASCII stays; backslash becomes "\\", \n \r \t their C
// escapes, every other byte below 0x20, DEL and any byte of 0x80 and above "\xNN" (so UTF-8 shows
// as its bytes: a log reader never sees a character the client chose). Longer than `max_bytes`
// of input: cut there, with "...(N more bytes)".
std::string LogEscape(std::string_view text, size_t max_bytes = 256);

// The host part of a peer address, the key refusals are counted under: "ipv4:10.0.0.5:41234"
// (gRPC's peer()) -> "ipv4:10.0.0.5", "10.0.0.5:41234" -> "10.0.0.5", "ipv6:[::1]:5000" ->
// "ipv6:[::1]"; text without a colon is its own host.
std::string PeerHost(const std::string& peer);

// Lines about refusals (bad tokens, malformed frames, connections over a cap), at most one per
// key (the peer's address) per `interval`. The next line let through says how many were dropped
// for that key meanwhile. At most `max_keys` peers are remembered; past that the table is
// cleared (a flood from many addresses then costs one line per address per interval at worst).
class RateLimitedLog {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RateLimitedLog(std::chrono::milliseconds interval = std::chrono::seconds(10),
                          size_t max_keys = 4096);

  // Whether a line for `key` may be written at `now`; when it may, *suppressed is how many were
  // refused for `key` since the last one written.
  bool Allow(const std::string& key, uint64_t* suppressed, Clock::time_point now = Clock::now());

  // HVD_LOG(WARNING) << line, when Allow(key) says so, with "(and N more from KEY since the
  // previous line, not logged...)" appended when some were dropped. `line` must be escaped.
  void Warn(const std::string& key, const std::string& line);

 private:
  struct Entry {
    Clock::time_point last;
    uint64_t suppressed = 0;
  };
  const std::chrono::milliseconds interval_;
  const size_t max_keys_;
  base::Mutex mu_;
  std::map<std::string, Entry> entries_ HVD_GUARDED_BY(mu_);
};

}  // namespace hvd::control
