// Shared by the libFuzzer targets in tests/fuzz/: a failed property aborts, which libFuzzer
// reports as a crash and saves the input as a reproducer (tests/fuzz/README.md).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#define HVD_FUZZ_CHECK(cond, what)                                                   \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "fuzz property failed at %s:%d: %s: %s\n", __FILE__,      \
                   __LINE__, #cond, std::string(what).c_str());                      \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)
