// Helpers shared by the Store implementations (not part of the public Store interface).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hvd/status.h"

namespace hvd::runtime::rendezvous::internal {

// DeadlineExceeded for a Wait that gave up: names the store, the timeout and the missing keys.
Status WaitTimedOut(const std::string& store, int64_t timeout_ms,
                    const std::vector<std::string>& missing);

// Parses a counter value for Add(); InvalidArgument naming the store and key when `text` is not a
// decimal integer.
Status ParseCounter(const std::string& store, std::string_view key, const std::string& text,
                    int64_t* out);

// *sum = value + delta; InvalidArgument on int64 overflow.
Status AddCounter(const std::string& store, std::string_view key, int64_t value, int64_t delta,
                  int64_t* sum);

// "No such file or directory (ENOENT)".
std::string ErrnoText(int err);

}  // namespace hvd::runtime::rendezvous::internal
