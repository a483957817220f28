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

}  // namespace hvd::runtime::rendezvous::internal
