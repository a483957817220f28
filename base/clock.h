// Clocks and durations as both sides use them: wall-clock milliseconds for the timestamps records
// carry (a job's submit time, a rank's end), and durations as messages show them ("2.5 s").
// Deadlines and intervals use std::chrono::steady_clock directly.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace hvd::base {

// Wall-clock milliseconds since the Unix epoch.
int64_t WallMs();

// Seconds with one decimal: "0.1 s", "30.0 s" (the same text in hvdrun, the launcher and the
// agent).
std::string SecondsText(std::chrono::milliseconds d);

}  // namespace hvd::base
