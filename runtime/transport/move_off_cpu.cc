#include "transport/move_off_cpu.h"

#include <atomic>
#include <chrono>

namespace hvd::runtime::transport {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kMinInterval = std::chrono::milliseconds(100);

std::atomic<long> g_moves{0};

}  // namespace

bool MoveOffCpu(int cpu, const cpu_set_t& taken) {
  thread_local Clock::time_point last_try{};
  if (cpu < 0 || cpu >= CPU_SETSIZE) return false;
  const Clock::time_point now = Clock::now();
  if (last_try != Clock::time_point{} && now - last_try < kMinInterval) return false;
  last_try = now;
  if (sched_getcpu() != cpu) return false;  // moved since the caller looked: nothing to do
  cpu_set_t allowed;
  // Fails (EINVAL) on a machine with more CPUs than a cpu_set_t holds: then stay.
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
  cpu_set_t target;
  CPU_ZERO(&target);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (c != cpu && CPU_ISSET(c, &allowed) && !CPU_ISSET(c, &taken)) CPU_SET(c, &target);
  }
  if (CPU_COUNT(&target) == 0) return false;
  if (sched_setaffinity(0, sizeof(target), &target) != 0) return false;
  const bool moved = sched_getcpu() != cpu;  // on a CPU of `target` now, unless it changed
  if (sched_setaffinity(0, sizeof(allowed), &allowed) != 0) {
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
    (void)sched_setaffinity(0, sizeof(all), &all);
  }
  if (moved) g_moves.fetch_add(1, std::memory_order_relaxed);
  return moved;
}

long MovesOffCpu() {
  return g_moves.load(std::memory_order_relaxed);
}

}  // namespace hvd::runtime::transport
