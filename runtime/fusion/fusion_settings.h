// The fusion settings, HVD_FUSION_THRESHOLD and HVD_FUSION_MAX_TENSOR_BYTES: declared here, next
// to the planner they tune, read once by Init (core/context.cc). Both shape the fusion plan, so
// every rank of a job must have the same values (base::kSameOnEveryRank).
#pragma once

#include "fusion/fusion_planner.h"
#include "hvd/status.h"

namespace hvd::runtime::fusion {

// The limits the environment sets; the defaults (kDefaultFusion*) for variables it leaves unset.
// InvalidArgument naming the variable when a value is malformed or out of range.
Status ReadFusionLimits(FusionLimits* out);

}  // namespace hvd::runtime::fusion
