// control::JobState / RankState <-> hvd.v1.JobState / RankState, checked: one function per
// direction and enum, used by every place that crosses the wire (the launcher's services and job
// store, the agent's launcher client, hvdrun, the JSON shape). The domain enums keep the wire
// numbers, but nothing relies on that: a number from the wire that no domain state has (a newer
// peer's, or garbage) becomes the explicit "unknown" value instead of an out-of-range enum.
#pragma once

#include "control/job_state.h"
#include "hvd/v1/common.pb.h"

namespace hvd::control {

// kUnspecified for JOB_STATE_UNSPECIFIED and for any number hvd.v1.JobState does not define.
JobState JobStateFromProto(v1::JobState p);
// kUnspecified for RANK_STATE_UNSPECIFIED and for any number hvd.v1.RankState does not define.
RankState RankStateFromProto(v1::RankState p);

// JOB_STATE_UNSPECIFIED / RANK_STATE_UNSPECIFIED for kUnspecified and for a value outside the
// domain enum. Every enumerator is listed in a switch without default, so a state added to
// job_state.h without its wire value fails the build (-Wswitch) instead of going out as 0.
v1::JobState JobStateToProto(JobState s);
v1::RankState RankStateToProto(RankState s);

}  // namespace hvd::control
