// The cluster token: a shared secret every call between hvdrun, hvd-launcherd and hvd-agent
// carries in the "hvd-token" gRPC metadata entry. Compared in constant time.
#pragma once

#include <string>
#include <string_view>

#include "hvd/status.h"

namespace hvd::control {

inline constexpr const char* kTokenMetadataKey = "hvd-token";

// Reads a token file: its first line, surrounding whitespace trimmed. Errors name the path and
// errno; an empty token, or a file readable by group/others, is refused with what to do.
Status ReadTokenFile(const std::string& path, std::string* token);

// Writes a fresh random token (32 bytes, hex) to `path` with mode 0600, creating the file.
Status WriteNewTokenFile(const std::string& path, std::string* token);

// A new random hex string of `bytes` random bytes (job ids, per-job secrets, tokens).
std::string RandomHex(size_t bytes);

// Constant-time equality (the time depends only on the lengths).
bool TokensEqual(std::string_view a, std::string_view b);

}  // namespace hvd::control
