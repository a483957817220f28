// "host:port" listen addresses for the launcher's endpoints, where port 0 asks for a free port,
// and the host workers are told to dial.
#pragma once

#include <string>

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

}  // namespace hvd::launcherd
