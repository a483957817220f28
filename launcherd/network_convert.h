// The network probe's hvd.v1 messages <-> the launcher's types.
#pragma once

#include "control/iface_choice.h"
#include "hvd/v1/network.pb.h"
#include "launcherd/probe_types.h"

namespace hvd::launcherd {

// Checked, as control/job_state_proto.h: a step number this build does not know (a newer
// agent's) is kUnspecified, which NetworkCheck ignores; every ProbeStep is listed in a switch.
ProbeStep ProbeStepFromProto(v1::NetworkProbe::Step p);
v1::NetworkProbe::Step ProbeStepToProto(ProbeStep s);

void ToProto(const ProbeCommand& c, v1::NetworkProbe* p);
ProbeReport FromProto(const v1::NetworkProbeReport& p);
// The network decision (control::NetworkReport), part of a job's status, converts with the job
// model: control/job_model_proto.h.

}  // namespace hvd::launcherd
