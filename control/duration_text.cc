#include "control/duration_text.h"

#include <cstdio>

namespace hvd::control {

std::string SecondsText(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

}  // namespace hvd::control
