// Translation between hvd.v1 messages and the launcher's domain types (job_types.h), shared by the
// gRPC services. The job model's conversions are control/job_model_proto.h (hvdrun's client uses
// the same ones); what only the launcher exchanges with agents is here. Protobuf only; no gRPC.
#pragma once

#include "control/job_model_proto.h"
#include "hvd/v1/agent.pb.h"
#include "hvd/v1/common.pb.h"
#include "hvd/v1/launcher.pb.h"
#include "launcherd/job_types.h"

namespace hvd::launcherd {

using control::FromProto;
using control::kSummaryArgvBytes;
using control::ToProto;
using control::ToSummaryProto;

RankEventReport FromProto(const v1::RankEvent& p);
// A registration: the agent's own fields only; its state, heartbeat and slots in use are the
// registry's to set (AgentRegistry), whatever the message says.
AgentInfo FromProto(const v1::AgentInfo& p);

void ToProto(const StartRankCommand& c, v1::StartRank* p);
void ToProto(const StopJobCommand& c, v1::StopJob* p);
// REQUIRES: !c.ranks.empty().
void ToProto(const StopJobCommand& c, v1::StopRanks* p);
void ToProto(const StackDumpCommand& c, v1::StackDump* p);

}  // namespace hvd::launcherd
