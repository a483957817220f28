// EngineStats, the engine's counters as tests, benchmarks and status reports read them, and
// RoundCounters, what the rounds count them with.
#pragma once

#include <atomic>
#include <cstdint>

namespace hvd::runtime::core {

// Counters for tests, benchmarks and status reports.
struct EngineStats {
  uint64_t cycles = 0;                    // rounds of the background loop (global set's cycles)
  uint64_t set_cycles = 0;                // cycles of process sets run between global rounds
  uint64_t caller_rounds = 0;             // rounds run on a caller's thread (HVD_RUN_ON_CALLER)
  uint64_t slow_path_cycles = 0;          // cycles that gathered requests through a set's root
  uint64_t cache_hits = 0;                // keys run from the response cache
  uint64_t eager_allreduces = 0;          // ... of them allreduces whose data rode with the bits
  uint64_t negotiated = 0;                // keys run from coordinator responses
  uint64_t allreduce_collectives = 0;     // allreduce collectives run (a batch may run several)
  uint64_t gpu_nccl_batches = 0;          // batches of device tensors run on NCCL...
  uint64_t gpu_staged_batches = 0;        // ...and staged through host memory
  uint64_t gpu_hierarchical_batches = 0;  // NCCL allreduces within hosts, the CPU ring across
};

// The counters the rounds bump, several per operation: atomics rather than a mutex, which cost
// two locked instructions per bump on the path of every small operation.
struct RoundCounters {
  std::atomic<uint64_t> cycles{0};
  std::atomic<uint64_t> set_cycles{0};
  std::atomic<uint64_t> caller_rounds{0};
  std::atomic<uint64_t> slow_path_cycles{0};
  std::atomic<uint64_t> cache_hits{0};
  std::atomic<uint64_t> eager_allreduces{0};
  std::atomic<uint64_t> negotiated{0};

  static void Add(std::atomic<uint64_t>& counter, uint64_t n = 1) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
  // The counters above into `stats` (the others it leaves).
  void Into(EngineStats* stats) const {
    stats->cycles = cycles.load(std::memory_order_relaxed);
    stats->set_cycles = set_cycles.load(std::memory_order_relaxed);
    stats->caller_rounds = caller_rounds.load(std::memory_order_relaxed);
    stats->slow_path_cycles = slow_path_cycles.load(std::memory_order_relaxed);
    stats->cache_hits = cache_hits.load(std::memory_order_relaxed);
    stats->eager_allreduces = eager_allreduces.load(std::memory_order_relaxed);
    stats->negotiated = negotiated.load(std::memory_order_relaxed);
  }
};

}  // namespace hvd::runtime::core
