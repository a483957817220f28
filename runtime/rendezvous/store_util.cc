#include "rendezvous/store_util.h"

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

}  // namespace hvd::runtime::rendezvous::internal
