#include "transport/move_off_cpu.h"

#include <sched.h>

#include <atomic>
#include <chrono>

namespace hvd::runtime::transport {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kMinInterval = std::chrono::milliseconds(100);

std::atomic<long> g_moves{0};

}  // namespace

bool MoveOffCpu(int cpu) {
  thread_local Clock::time_point last_try{};
  if (cpu < 0 || cpu >= CPU_SETSIZE) return false;
  const Clock::time_point now = Clock::now();
  if (last_try != Clock::time_point{} && now - last_try < kMinInterval) return false;
  last_try = now;
  cpu_set_t allowed;
  // Fails (EINVAL) on a machine with more CPUs than a cpu_set_t holds: then stay.
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
  if (!CPU_ISSET(cpu, &allowed) || CPU_COUNT(&allowed) < 2) return false;
  cpu_set_t others = allowed;
  CPU_CLR(cpu, &others);
  if (sched_setaffinity(0, sizeof(others), &others) != 0) return false;
  // The affinity back as it was. Fails only if the allowed CPUs changed meanwhile (a cpuset),
  // and then the kernel's own limit applies anyway.
  (void)sched_setaffinity(0, sizeof(allowed), &allowed);
  g_moves.fetch_add(1, std::memory_order_relaxed);
  return true;
}

long MovesOffCpu() {
  return g_moves.load(std::memory_order_relaxed);
}

}  // namespace hvd::runtime::transport
