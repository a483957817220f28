// JSON text helpers for the timeline writer (private to timeline/).
#pragma once

#include <string>
#include <string_view>

namespace hvd::runtime::timeline {

// Appends `s` as a quoted JSON string. Quotes, backslashes and control characters are escaped;
// bytes that are not valid UTF-8 become U+FFFD so one odd tensor name cannot make the whole trace
// unparseable.
void AppendJsonString(std::string_view s, std::string* out);

// Appends `args` (documented as JSON object text) as an "args" value. Text that is not even
// shaped like an object is wrapped as {"text": "<args>"} instead, for the same reason.
void AppendJsonArgs(std::string_view args, std::string* out);

}  // namespace hvd::runtime::timeline
