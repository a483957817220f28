// Addresses as the runtime and the control plane both read them: "HOST:PORT" text (a flag, an
// environment variable, what a rank publishes), IPv4 resolution, and this machine's host name.
// Errors name the text and what was wrong; callers add which flag or variable it came from.
#pragma once

#include <netinet/in.h>

#include <string>
#include <string_view>

#include "hvd/status.h"

namespace hvd::base {

struct HostPort {
  std::string host;  // without the brackets of "[::1]:80"
  int port = 0;
};

// What ParseHostPort accepts besides "host:port" with a port of 1..65535.
struct HostPortRules {
  bool port_zero = false;    // "host:0" (a listener: any free port)
  bool empty_host = false;   // ":7070" (a listener: every interface)
  std::string_view example;  // shown after "is not HOST:PORT": "(e.g. <example>)"
};

// Splits "HOST:PORT" at the last ':' (so "[::1]:80" and "::1:80" work) and drops the brackets of
// "[::1]". The port is decimal digits only. InvalidArgument otherwise, naming the text:
//   "'x' is not HOST:PORT" (no ':', no port, or an empty host the rules do not allow), or
//   "'x:y': the port must be 1..65535" ("0..65535 (0: any free port)" with rules.port_zero).
Status ParseHostPort(std::string_view text, HostPortRules rules, HostPort* out);
inline Status ParseHostPort(std::string_view text, HostPort* out) {
  return ParseHostPort(text, HostPortRules{}, out);
}

// Resolves `host` (a dotted IPv4 address, or a name: its first A record) and `port` into *addr.
// Failing: "cannot resolve 'h' to an IPv4 address: <why>", Unavailable when asking again may help
// (the resolver did not answer: EAI_AGAIN) and InvalidArgument otherwise (no such name). An
// out-of-range port is InvalidArgument.
Status ResolveIPv4(const std::string& host, int port, sockaddr_in* addr);

// This machine's host name (gethostname), `fallback` when it has none or the call fails.
std::string LocalHostName(const std::string& fallback = "localhost");

}  // namespace hvd::base
