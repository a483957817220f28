#include "base/net.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "base/errno_text.h"

namespace hvd::base {

Status ParseHostPort(std::string_view text, HostPortRules rules, HostPort* out) {
  const std::string shown = "'" + std::string(text) + "'";
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == text.size() ||
      (colon == 0 && !rules.empty_host)) {
    return InvalidArgument(
        shown + " is not HOST:PORT" +
        (rules.example.empty() ? "" : " (e.g. " + std::string(rules.example) + ")"));
  }
  const std::string_view digits = text.substr(colon + 1);
  int port = 0;
  bool ok = digits.size() <= 5;
  for (char c : digits) {
    ok = ok && c >= '0' && c <= '9';
    if (ok) port = port * 10 + (c - '0');
  }
  if (!ok || port > 65535 || (port == 0 && !rules.port_zero)) {
    return InvalidArgument(shown + ": the port must be " +
                           (rules.port_zero ? "0..65535 (0: any free port)" : "1..65535"));
  }
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  out->host = std::string(host);
  out->port = port;
  return Status::OK();
}

Status ResolveIPv4(const std::string& host, int port, sockaddr_in* addr) {
  if (port < 0 || port > 65535) {
    return InvalidArgument("port " + std::to_string(port) + " out of range");
  }
  *addr = sockaddr_in{};
  addr->sin_family = AF_INET;
  addr->sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr->sin_addr) == 1) return Status::OK();
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    const int err = errno;
    if (res != nullptr) freeaddrinfo(res);
    const std::string m = "cannot resolve '" + host + "' to an IPv4 address: " +
                          (rc == EAI_SYSTEM ? ErrnoText(err) : gai_strerror(rc));
    // A name that does not exist will not appear by asking again; a DNS hiccup may pass.
    return rc == EAI_AGAIN ? Unavailable(m) : InvalidArgument(m);
  }
  addr->sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return Status::OK();
}

std::string LocalHostName(const std::string& fallback) {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return fallback;
  return name;
}

}  // namespace hvd::base
