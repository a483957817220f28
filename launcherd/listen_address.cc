#include "launcherd/listen_address.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/net.h"

namespace hvd::launcherd {

Status ParseListenAddress(const std::string& address, std::string* host, int* port) {
  base::HostPortRules listener;
  listener.port_zero = true;
  listener.empty_host = true;
  listener.example = "0.0.0.0:7070, or 127.0.0.1:0 for any free port";
  base::HostPort hp;
  HVD_RETURN_IF_ERROR(base::ParseHostPort(address, listener, &hp));
  *host = hp.host;
  *port = hp.port;
  return Status::OK();
}

bool IsWildcardHost(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]" || host == "*";
}

namespace {

// Whether listeners on `a` and `b` (one port) would take the same socket address: the same host,
// "" or "*" (any), 0.0.0.0 and an IPv4 host, or "::" (which Linux binds dual-stack) and any host.
// An IPv4 and an IPv6 address otherwise bind side by side.
bool HostsOverlap(const std::string& a, const std::string& b) {
  if (a == b) return true;
  auto any = [](const std::string& h) { return h.empty() || h == "*" || h == "::" || h == "[::]"; };
  if (any(a) || any(b)) return true;
  auto v6 = [](const std::string& h) { return h.find(':') != std::string::npos; };
  return (a == "0.0.0.0" && !v6(b)) || (b == "0.0.0.0" && !v6(a));
}

}  // namespace

Status CheckDistinctPorts(const std::vector<std::pair<std::string, std::string>>& endpoints) {
  struct Parsed {
    std::string host;
    int port = 0;
  };
  std::vector<Parsed> parsed(endpoints.size());
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const auto& [address, flag] = endpoints[i];
    if (address.empty()) continue;
    HVD_RETURN_IF_ERROR_CTX(ParseListenAddress(address, &parsed[i].host, &parsed[i].port), flag);
    for (size_t j = 0; j < i; ++j) {
      const Parsed& a = parsed[j];
      const Parsed& b = parsed[i];
      if (b.port == 0 || a.port != b.port || !HostsOverlap(a.host, b.host)) continue;
      return InvalidArgument(flag + " " + address + " and " + endpoints[j].second + " " +
                             endpoints[j].first +
                             " name the same port: each of hvd-launcherd's endpoints needs a port "
                             "of its own");
    }
  }
  return Status::OK();
}

Status CheckCanListen(const std::string& address, const std::string& flag) {
  std::string host;
  int port = 0;
  HVD_RETURN_IF_ERROR_CTX(ParseListenAddress(address, &host, &port), flag);
  if (port == 0) return Status::OK();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const bool wildcard = IsWildcardHost(host);
  const int rc = getaddrinfo(wildcard ? "0.0.0.0" : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) {
    return InvalidArgument(flag + " " + address + ": cannot resolve '" + host +
                           "': " + gai_strerror(rc) + "; give an address of this machine");
  }
  int err = 0;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    err = bind(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    close(fd);
    if (err == 0) break;
  }
  freeaddrinfo(found);
  if (err == 0) return Status::OK();
  std::string why = std::strerror(err);
  if (err == EADDRINUSE) {
    why =
        "the port is in use (another hvd-launcherd, or another program, listens there); stop "
        "it or pick another port";
  } else if (err == EADDRNOTAVAIL) {
    why = "'" + host +
          "' is not an address of this machine; give one of its addresses, or "
          "0.0.0.0 for all";
  } else if (err == EACCES) {
    why = "permission denied (ports below 1024 need privileges); pick a port above 1023";
  }
  return Unavailable("cannot listen on " + address + " (" + flag + "): " + why);
}

}  // namespace hvd::launcherd
