// The job model (job_model.h) to and from its hvd.v1 messages: the one translation the launcher's
// services, its job store and hvdrun's client all use, so the two ends cannot drift apart. Each
// FromProto keeps every field the message carries; what a receiver must not take from its peer
// (an agent's own heartbeat time, say) is the receiver's to clear. Protobuf only; no gRPC.
#pragma once

#include "control/job_model.h"
#include "control/spec_limits.h"  // the domain overloads of the checks below
#include "hvd/status.h"
#include "hvd/v1/common.pb.h"
#include "hvd/v1/launcher.pb.h"
#include "hvd/v1/network.pb.h"

namespace hvd::control {

// The proto's unset optional limits and stdin_rank become -1 (job_model.h's "unset").
JobSpec FromProto(const v1::JobSpec& p);
void ToProto(const JobSpec& s, v1::JobSpec* p);

// The whole record, as ToProto wrote it (the launcher's state store reads jobs back with it,
// hvdrun reads GetJob's and ListJobs' answers).
JobStatus FromProto(const v1::JobStatus& p);
void ToProto(const JobStatus& s, v1::JobStatus* p);

// ListJobs' entry (JobStatus.summarized): what `hvdrun list` and GET /v1/jobs show, bounded in
// size whatever the spec held. argv keeps whole arguments up to kSummaryArgvBytes; the one that
// crosses it is cut and ends with "...", later ones are left out.
inline constexpr size_t kSummaryArgvBytes = 1024;
void ToSummaryProto(const JobStatus& s, v1::JobStatus* p);

OutputLine FromProto(const v1::OutputLine& p);
void ToProto(const OutputLine& l, v1::OutputLine* p);

// false for an event that carries none of output, status and progress (a newer launcher's kind):
// there is nothing to act on.
bool FromProto(const v1::JobEvent& p, JobEvent* e);
void ToProto(const JobEvent& e, v1::JobEvent* p);

// Every field, the launcher's own (state, heartbeat, slots in use) included.
AgentInfo AgentInfoFromProto(const v1::AgentInfo& p);
void ToProto(const AgentInfo& a, v1::AgentInfo* p);

void ToProto(const RankSlot& s, v1::RankPlacement* p);
RankSlot FromProto(const v1::RankPlacement& p);

void ToProto(const NetworkReport& r, v1::NetworkReport* p);
// For the job store and hvdrun: a job keeps its network decision.
NetworkReport FromProto(const v1::NetworkReport& p);

// spec_limits.h's checks of what arrives on the wire, where the launcher's services receive it.
// A message can say what the domain types cannot: an explicitly set negative limit or stdin_rank
// (-1 in JobSpec means "unset"), which is refused here as ValidateJobSpec would refuse any other
// out-of-range value.
Status ValidateJobSpec(const v1::JobSpec& p);
Status ValidateAgentInfo(const v1::AgentInfo& p);

}  // namespace hvd::control
