// "host:port" listen addresses for the launcher's endpoints, where port 0 asks for a free port,
// and the host workers are told to dial.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "hvd/status.h"

namespace hvd::launcherd {

// Splits a listen address, "host:port" with port 0..65535 and an empty host allowed (":7070"), by
// base::ParseHostPort ("[::1]:0" keeps the brackets off the host). InvalidArgument naming the
// text and the expected form.
Status ParseListenAddress(const std::string& address, std::string* host, int* port);

// Whether `host` means every interface ("0.0.0.0", "::", "[::]", "" or "*").
bool IsWildcardHost(const std::string& host);

// Whether a TCP listener can bind `address` ("host:port") now, checked by binding and closing a
// socket (with SO_REUSEADDR, as the servers do). OK for port 0. Otherwise Unavailable naming the
// address, `flag` and the reason, in one line: a port in use says another process (another
// hvd-launcherd?) listens there. Run before starting the servers, so a busy port is that one
// message rather than gRPC's raw bind error.
Status CheckCanListen(const std::string& address, const std::string& flag);

// The launcher's endpoints, each {address, the flag that set it} (empty addresses skipped): OK
// unless two fixed ports are the same on hosts that overlap (the same host; "", "*" or "::" and
// any; 0.0.0.0 and an IPv4 host), which InvalidArgument names by both flags. Port 0 (any free
// port) never clashes; an IPv4 and an IPv6 host do not.
Status CheckDistinctPorts(const std::vector<std::pair<std::string, std::string>>& endpoints);

}  // namespace hvd::launcherd
