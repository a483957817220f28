#include <map>

#include "core/context.h"

namespace hvd::runtime::core {

Topology ComputeTopology(int rank, const std::vector<std::string>& hosts) {
  Topology t;
  t.rank = rank;
  t.size = static_cast<int>(hosts.size());
  std::map<std::string, int> seen;  // host -> ranks counted so far
  std::vector<int> local_rank_of(hosts.size());
  for (size_t r = 0; r < hosts.size(); ++r) local_rank_of[r] = seen[hosts[r]]++;
  t.local_rank = local_rank_of[rank];
  t.local_size = seen[hosts[rank]];
  for (const auto& [host, n] : seen) t.homogeneous = t.homogeneous && n == t.local_size;
  // Ranks sharing this local rank, in rank order, one per host.
  t.cross_rank = 0;
  t.cross_size = 0;
  for (size_t r = 0; r < hosts.size(); ++r) {
    if (local_rank_of[r] != t.local_rank) continue;
    if (static_cast<int>(r) < rank) ++t.cross_rank;
    ++t.cross_size;
  }
  return t;
}

}  // namespace hvd::runtime::core
