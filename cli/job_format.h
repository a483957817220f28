// Human-readable text for jobs and agents: the failure summary hvdrun prints when a job ends
// badly, `status`'s detail view, and the `list` and `agents` tables. Pure (the clock is passed
// in) so the exact text is tested.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hvd/v1/common.pb.h"
#include "hvd/v1/launcher.pb.h"

namespace hvd::cli {

bool IsTerminal(v1::JobState state);
const char* JobStateText(v1::JobState state);
const char* RankStateText(v1::RankState state);

// What hvdrun exits with for a finished job: its exit_code, made non-zero when the launcher
// left it 0 on a job that did not succeed (1, or 130 for a cancelled one).
int JobExitCode(const v1::JobStatus& status);

// Lines (each ending in '\n', each starting "hvdrun: ") saying why a job did not succeed: the
// failing rank, its host, exit code or signal, and its last stderr lines; or the job's reason.
// Empty for a job that succeeded.
std::string FailureSummary(const v1::JobStatus& status);

// How long a PENDING job has waited for slots, and its --queue-timeout if any, in seconds as the
// launcher's messages write them: "for 245.0 s", "for 12.0 s of at most 60.0 s (--queue-timeout)".
std::string WaitingText(const v1::JobStatus& status, int64_t now_ms);

// `hvdrun status JOB`: the job, its spec, and one line per rank.
std::string JobDetail(const v1::JobStatus& status, int64_t now_ms);

// `hvdrun list`: one row per job.
std::string JobTable(const std::vector<v1::JobStatus>& jobs, int64_t now_ms);

// `hvdrun agents`: one row per agent.
std::string AgentTable(const std::vector<v1::AgentInfo>& agents, int64_t now_ms);

// "3.2 s" (control::SecondsText, as the launcher's messages), "4m05s", "2h03m"; "-" for negative.
std::string FormatDuration(int64_t ms);

}  // namespace hvd::cli
