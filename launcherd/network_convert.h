// The network probe's and the network decision's hvd.v1 messages <-> the launcher's types.
#pragma once

#include "control/iface_choice.h"
#include "hvd/v1/network.pb.h"
#include "launcherd/probe_types.h"

namespace hvd::launcherd {

void ToProto(const ProbeCommand& c, v1::NetworkProbe* p);
ProbeReport FromProto(const v1::NetworkProbeReport& p);
void ToProto(const control::NetworkReport& r, v1::NetworkReport* p);
// For the job store: a restored job keeps its network decision.
control::NetworkReport FromProto(const v1::NetworkReport& p);

}  // namespace hvd::launcherd
