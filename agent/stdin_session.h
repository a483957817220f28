// An agent started for one job over SSH (hvdrun --ssh) talks to its starter through stdin: the
// cluster token arrives as the first line (never on a command line or on disk), and the end of
// stdin means the starter is done or gone, so the agent stops as on SIGTERM and never outlives
// hvdrun, even when hvdrun or the connection dies.
#pragma once

#include <chrono>
#include <string>

#include "hvd/status.h"

namespace hvd::agent {

// Reads the first line of `fd` within `timeout`, surrounding whitespace trimmed. Errors say what
// was read and what is expected.
Status ReadTokenLine(int fd, std::chrono::milliseconds timeout, std::string* token);

// Starts a detached thread that reads `fd` until end of file (or an error), then sends SIGTERM to
// this process.
void SigtermOnEof(int fd);

}  // namespace hvd::agent
