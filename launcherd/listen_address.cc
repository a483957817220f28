#include "launcherd/listen_address.h"

#include <unistd.h>

#include "common/settings.h"

namespace hvd::launcherd {

Status ParseListenAddress(const std::string& address, std::string* host, int* port) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return InvalidArgument("'" + address +
                           "' is not HOST:PORT (e.g. 0.0.0.0:7070, or 127.0.0.1:0 for any free "
                           "port)");
  }
  int64_t p = -1;
  Status s = common::ParseInt64(address.substr(colon + 1), &p);
  if (!s.ok() || p < 0 || p > 65535) {
    return InvalidArgument("'" + address + "': the port must be 0..65535 (0: any free port)");
  }
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  *host = h;
  *port = static_cast<int>(p);
  return Status::OK();
}

bool IsWildcardHost(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]" || host == "*";
}

std::string LocalHostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace hvd::launcherd
