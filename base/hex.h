// Hexadecimal text: escaped bytes ("\x1b" in logs, "%2F" in file names, "\u001b" in JSON) and
// numbers in messages (a handshake's magic, a scope hash in a socket name).
#pragma once

#include <cstdint>
#include <string>

namespace hvd::base {

// Appends the two hex digits of `byte` to *out: lower case ("1b"), or upper case ("1B").
void AppendHexByte(uint8_t byte, std::string* out, bool upper = false);

// `v` in lower-case hex, zero-padded to at least `min_digits` digits: Hex(255) == "ff",
// Hex(255, 4) == "00ff". No "0x": callers that want it add it.
std::string Hex(uint64_t v, int min_digits = 1);

}  // namespace hvd::base
