// The job's shape from the environment: HVD_RANK and HVD_SIZE, and the launcher's topology
// (HVD_LOCAL_RANK, HVD_LOCAL_SIZE, HVD_CROSS_RANK, HVD_CROSS_SIZE), with Horovod's names.
#include "core/topology_settings.h"

#include <string>

#include "base/logging.h"
#include "base/settings.h"

namespace hvd::runtime::core {
namespace {

using base::Setting;

const Setting<int64_t> kRank("HVD_RANK", "HOROVOD_RANK", -1, "this process's rank, 0..size-1");
const Setting<int64_t> kSize("HVD_SIZE", "HOROVOD_SIZE", -1,
                             "number of ranks; unset: a single-process job (rank 0 of 1)");
const Setting<int64_t> kLocalRank(
    "HVD_LOCAL_RANK", "HOROVOD_LOCAL_RANK", -1,
    "rank among this host's processes; unset: derived from host names");
const Setting<int64_t> kLocalSize("HVD_LOCAL_SIZE", "HOROVOD_LOCAL_SIZE", -1,
                                  "processes on this host; unset: derived");
const Setting<int64_t> kCrossRank(
    "HVD_CROSS_RANK", "HOROVOD_CROSS_RANK", -1,
    "index of this host among hosts with this local rank; unset: derived");
const Setting<int64_t> kCrossSize("HVD_CROSS_SIZE", "HOROVOD_CROSS_SIZE", -1,
                                  "hosts with a process of this local rank; unset: derived");

}  // namespace

Status ReadRankAndSize(int64_t* rank, int64_t* size) {
  // Given: InitOptions' value (>= 0), or the variable set to anything (-3 is out of range, not
  // unset). Errors name the variable that was set (HOROVOD_SIZE where that one was).
  std::string size_name = kSize.name(), rank_name = kRank.name();
  bool size_given = *size >= 0, rank_given = *rank >= 0;
  if (!size_given && kSize.IsSet(&size_name)) {
    size_given = true;
    HVD_RETURN_IF_ERROR(kSize.Get(size));
  }
  if (!rank_given && kRank.IsSet(&rank_name)) {
    rank_given = true;
    HVD_RETURN_IF_ERROR(kRank.Get(rank));
  }
  if (!size_given) {
    HVD_LOG(INFO) << "no HVD_SIZE or HOROVOD_SIZE in the environment: running as a single "
                     "process (rank 0 of 1); start jobs with hvdrun to run several ranks";
    *size = 1;
    if (!rank_given) *rank = 0;
  }
  HVD_RETURN_IF_ERROR(base::CheckRange(size_name, *size, 1, 1 << 20,
                                       "set the number of ranks, or unset it for a single "
                                       "process"));
  if (!rank_given && *rank < 0) {
    return InvalidArgument(size_name + "=" + std::to_string(*size) +
                           " is set but HVD_RANK (or HOROVOD_RANK) is not; set both, or start "
                           "the job with hvdrun");
  }
  return base::CheckRange(rank_name, *rank, 0, *size - 1, "ranks count from 0 to size-1");
}

// Each one given is checked against the job's size and its pair: a LocalRank() past LocalSize()
// would have the program pick a device that is another rank's.
Status ReadTopologyOverrides(Topology* t) {
  int64_t local_rank, local_size, cross_rank, cross_size;
  HVD_RETURN_IF_ERROR(kLocalRank.Get(&local_rank));
  HVD_RETURN_IF_ERROR(kLocalSize.Get(&local_size));
  HVD_RETURN_IF_ERROR(kCrossRank.Get(&cross_rank));
  HVD_RETURN_IF_ERROR(kCrossSize.Get(&cross_size));
  // Given: set to anything (-5 is out of range, not unset); errors name the spelling set.
  std::string name;
  const char* kAdvice = "give values that fit this job, or unset them to derive them from hosts";
  if (kLocalSize.IsSet(&name)) {
    HVD_RETURN_IF_ERROR(base::CheckRange(name, local_size, 1, t->size, kAdvice));
    t->local_size = static_cast<int>(local_size);
  }
  if (kCrossSize.IsSet(&name)) {
    HVD_RETURN_IF_ERROR(base::CheckRange(name, cross_size, 1, t->size, kAdvice));
    t->cross_size = static_cast<int>(cross_size);
  }
  if (kLocalRank.IsSet(&name)) {
    HVD_RETURN_IF_ERROR(base::CheckRange(name, local_rank, 0, t->local_size - 1, kAdvice));
    t->local_rank = static_cast<int>(local_rank);
  }
  if (kCrossRank.IsSet(&name)) {
    HVD_RETURN_IF_ERROR(base::CheckRange(name, cross_rank, 0, t->cross_size - 1, kAdvice));
    t->cross_rank = static_cast<int>(cross_rank);
  }
  return Status::OK();
}

}  // namespace hvd::runtime::core
