// Durations as messages and logs show them to people: "2.5 s".
#pragma once

#include <chrono>
#include <string>

namespace hvd::control {

// Seconds with one decimal: "0.1 s", "30.0 s".
std::string SecondsText(std::chrono::milliseconds d);

}  // namespace hvd::control
