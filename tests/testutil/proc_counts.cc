#include "testutil/proc_counts.h"

#include <chrono>
#include <filesystem>
#include <thread>

namespace hvd {
namespace testing {

size_t CountEntries(const char* dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

size_t ThreadsSettlingAtMost(size_t limit) {
  size_t n = CountEntries("/proc/self/task");
  for (int i = 0; i < 200 && n > limit; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    n = CountEntries("/proc/self/task");
  }
  return n;
}

size_t SettledThreadCount() {
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return CountEntries("/proc/self/task");
}

}  // namespace testing
}  // namespace hvd
