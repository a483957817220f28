// Translation between hvd.v1 messages and the launcher's domain types (job_types.h), shared by the
// gRPC services. Protobuf only; no gRPC.
#pragma once

#include "hvd/v1/agent.pb.h"
#include "hvd/v1/common.pb.h"
#include "hvd/v1/launcher.pb.h"
#include "launcherd/job_types.h"

namespace hvd::launcherd {

JobSpec FromProto(const v1::JobSpec& p);
RankEventReport FromProto(const v1::RankEvent& p);
AgentInfo FromProto(const v1::AgentInfo& p);
OutputLine FromProto(const v1::OutputLine& p);
// The whole record, as ToProto wrote it (the launcher's state store reads jobs back with it).
JobStatus FromProto(const v1::JobStatus& p);

void ToProto(const JobStatus& s, v1::JobStatus* p);
// ListJobs' entry (JobStatus.summarized): what `hvdrun list` and GET /v1/jobs show, bounded in
// size whatever the spec held. argv keeps whole arguments up to kSummaryArgvBytes; the one that
// crosses it is cut and ends with "...", later ones are left out.
inline constexpr size_t kSummaryArgvBytes = 1024;
void ToSummaryProto(const JobStatus& s, v1::JobStatus* p);
void ToProto(const JobEvent& e, v1::JobEvent* p);
void ToProto(const AgentInfo& a, v1::AgentInfo* p);
void ToProto(const StartRankCommand& c, v1::StartRank* p);
void ToProto(const StopJobCommand& c, v1::StopJob* p);

}  // namespace hvd::launcherd
