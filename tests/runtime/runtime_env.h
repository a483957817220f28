// Helpers for tests of the public API: each rank runs in a forked child (tests/testutil/
// multiproc.h), sets the environment a launcher would set, and calls hvd::Init().
#pragma once

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace hvd::testing {

// Sets HVD_RANK, HVD_SIZE, HVD_RENDEZVOUS (plus `extra`) and initializes hvd with `options`
// (process sets, dynamic process sets...).
inline Status InitRankWith(int rank, int size, const std::string& store_dir,
                           const InitOptions& options,
                           const std::map<std::string, std::string>& extra = {}) {
  setenv("HVD_RANK", std::to_string(rank).c_str(), 1);
  setenv("HVD_SIZE", std::to_string(size).c_str(), 1);
  setenv("HVD_RENDEZVOUS", ("file://" + store_dir).c_str(), 1);
  setenv("HVD_START_TIMEOUT_SECONDS", "30", 0);
  setenv("HVD_PEER_TIMEOUT_SECONDS", "20", 0);
  for (const auto& [k, v] : extra) setenv(k.c_str(), v.c_str(), 1);
  return Init(options);
}

inline Status InitRank(int rank, int size, const std::string& store_dir,
                       const std::map<std::string, std::string>& extra = {}) {
  return InitRankWith(rank, size, store_dir, InitOptions{}, extra);
}

// Returns an error describing the first difference between `got` and `want`.
template <typename T>
Status ExpectEqual(const std::string& what, const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) {
    return Internal(what + ": size " + std::to_string(got.size()) + ", want " +
                    std::to_string(want.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == want[i])) {
      return Internal(what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                      ", want " + std::to_string(want[i]));
    }
  }
  return Status::OK();
}

// Whether `s` contains `part` (for checking error messages).
inline bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Fails with `message` unless `cond`.
inline Status Check(bool cond, const std::string& message) {
  return cond ? Status::OK() : Internal(message);
}

}  // namespace hvd::testing

namespace hvd::testing {
inline AllreduceOptions Sum() {
  AllreduceOptions o;
  o.op = ReduceOp::kSum;
  return o;
}
}  // namespace hvd::testing
