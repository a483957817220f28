// Small text helpers that the line-oriented parsers share (hostfiles, control/host_spec.h;
// horovodrun's YAML config file, cli/config_file.h), so that both split lines and trim blanks
// alike: '\n' ends a line, a '\r' before it is dropped (files written on Windows), and a file's
// last line needs no '\n'.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace hvd::control {

// `s` without leading and trailing whitespace (as std::isspace, in the C locale).
std::string_view Trim(std::string_view s);
// `s` without trailing whitespace.
std::string_view TrimRight(std::string_view s);

// The lines of `text`, without their '\n' nor a '\r' before it; line i is (i+1)th of the file.
// A final '\n' ends the last line (no empty line after it); "" has no lines.
std::vector<std::string_view> SplitLines(std::string_view text);

// `text` without a leading UTF-8 byte order mark (EF BB BF), which some Windows editors write
// at the start of a file and which would otherwise be part of its first key or host name.
std::string_view StripUtf8Bom(std::string_view text);

// The longest prefix of `text` of at most `max_bytes` that does not end inside a UTF-8 sequence:
// a cut that keeps valid UTF-8 valid (a protobuf string must be; a cut through a character made
// an output line the launcher could not send).
std::string_view Utf8Prefix(std::string_view text, size_t max_bytes);

}  // namespace hvd::control
