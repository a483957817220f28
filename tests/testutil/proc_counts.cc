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
  // An exiting thread preempted on a busy machine can stay listed for more than a moment.
  size_t n = CountEntries("/proc/self/task");
  for (int same = 0, i = 0; same < 10 && i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const size_t now = CountEntries("/proc/self/task");
    same = now == n ? same + 1 : 0;
    n = now;
  }
  return n;
}

}  // namespace testing
}  // namespace hvd
