// The job's process sets (Horovod 0.23+): subsets of ranks that run collectives among
// themselves. Id 0, the global set, is every rank; other ids are given out in the order sets are
// added (at Init from HVD_PROCESS_SETS / InitOptions, or later by AddProcessSet) and never
// reused within one Init.
//
// Every rank holds the same table: static sets are registered before the engine starts, and
// dynamic changes are negotiated in the global set and applied by every rank's background thread
// in the same cycle (core/engine.h). The table is read from any thread (ProcessSetRank() ...);
// only the background thread (or Init, before it starts) writes it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "hvd/status.h"

namespace hvd::runtime::core {

class ProcessSetTable {
 public:
  explicit ProcessSetTable(int size);  // registers the global set
  ProcessSetTable(const ProcessSetTable&) = delete;
  ProcessSetTable& operator=(const ProcessSetTable&) = delete;

  // The set's job ranks, sorted; false when `id` is not registered.
  bool Get(int id, std::vector<int>* ranks) const;
  std::vector<int> Ids() const;
  // The id of a registered set with exactly these (sorted) ranks, or -1.
  int Find(const std::vector<int>& ranks) const;
  // "0, 1, 3" (for errors that list what exists).
  std::string DescribeIds() const;

  // REQUIRES: ranks valid (ValidateProcessSetRanks) and not registered yet.
  int Add(std::vector<int> ranks);
  // False when `id` is not registered. REQUIRES: id != 0.
  bool Remove(int id);

 private:
  mutable base::Mutex mu_;
  std::map<int, std::vector<int>> sets_ HVD_GUARDED_BY(mu_);
  int next_id_ HVD_GUARDED_BY(mu_) = 1;
};

// Checks a process set's ranks for a job of `size` ranks and returns them sorted (Horovod sorts
// too). InvalidArgument naming the bad entry: empty, out of range, or repeated.
Status ValidateProcessSetRanks(const std::vector<int>& ranks, int size, std::vector<int>* sorted);

// Parses HVD_PROCESS_SETS: sets separated by ';', ranks by ',' ("0,1;2,3"). Empty: none.
Status ParseProcessSets(const std::string& text, std::vector<std::vector<int>>* out);
// The canonical text of `sets` (sorted ranks), as ParseProcessSets reads it.
std::string FormatProcessSets(const std::vector<std::vector<int>>& sets);
// "[0, 2, 3]", for messages.
std::string RanksText(const std::vector<int>& ranks);

}  // namespace hvd::runtime::core
