// The job's shape from the environment (core/topology_settings.cc): this process's rank and the
// job's size, and the topology a launcher gives (HVD_LOCAL_RANK, HVD_LOCAL_SIZE, HVD_CROSS_RANK,
// HVD_CROSS_SIZE), each with Horovod's HOROVOD_ name.
#pragma once

#include <cstdint>

#include "core/context.h"
#include "hvd/status.h"

namespace hvd::runtime::core {

// *rank and *size as hvd::InitOptions gave them (-1: not given), completed from HVD_RANK and
// HVD_SIZE. No HVD_SIZE: a single-process job (rank 0 of 1). A variable set to anything is
// given: -3 is out of range, not unset. InvalidArgument naming the variable otherwise.
Status ReadRankAndSize(int64_t* rank, int64_t* size);

// Overrides `t`'s derived local and cross numbers with those the launcher set, each checked
// against the job's size and its pair (HVD_LOCAL_RANK < HVD_LOCAL_SIZE).
Status ReadTopologyOverrides(Topology* t);

}  // namespace hvd::runtime::core
