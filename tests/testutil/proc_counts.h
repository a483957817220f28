// Counts of what this process holds, read from /proc/self, for the tests that check a component
// leaves no thread, descriptor or mapping behind.
#pragma once

#include <cstddef>

namespace hvd {
namespace testing {

// Entries of a /proc/self directory (threads in "/proc/self/task", descriptors in
// "/proc/self/fd"); the descriptor that reads the directory is counted too.
size_t CountEntries(const char* dir);

// The thread count once it is at most `limit`, waiting up to 1 s for it: a joined thread may stay
// listed in /proc/self/task for a moment after pthread_join returns (the kernel wakes the joiner
// when it clears the thread's tid, before it reaps the task). Returns the last count read when it
// stays above `limit`, so a real leak still shows.
size_t ThreadsSettlingAtMost(size_t limit);

// The thread count once it has not changed for 50 ms (waiting at most 1 s), by when a thread
// joined just before is no longer listed: the baseline ThreadsSettlingAtMost's limit comes from.
size_t SettledThreadCount();

}  // namespace testing
}  // namespace hvd
