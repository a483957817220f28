// Deterministic per-(rank, index) test data: splitmix64's finalizer, so every rank can compute
// every other rank's inputs (and the exact reference) without exchanging them.
#pragma once

#include <cstdint>

namespace hvd::testing {

inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace hvd::testing
