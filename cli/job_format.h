// Human-readable text for jobs and agents: the failure summary hvdrun prints when a job ends
// badly, `status`'s detail view, and the `list` and `agents` tables. Pure (the clock is passed
// in) so the exact text is tested.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "control/job_model.h"

namespace hvd::cli {

// control::JobStateName / RankStateName, as hvdrun writes states ("RUNNING").
const char* JobStateText(control::JobState state);
const char* RankStateText(control::RankState state);

// What hvdrun exits with for a finished job: its exit_code, made non-zero when the launcher
// left it 0 on a job that did not succeed (1, or 130 for a cancelled one).
int JobExitCode(const control::JobStatus& status);

// Lines (each ending in '\n', each starting "hvdrun: ") saying why a job did not succeed: the
// failing rank, its host, exit code or signal, and its last stderr lines; or the job's reason.
// Empty for a job that succeeded.
std::string FailureSummary(const control::JobStatus& status);

// How long a PENDING job has waited for slots, and its --queue-timeout if any, in seconds as the
// launcher's messages write them: "for 245.0 s", "for 12.0 s of at most 60.0 s (--queue-timeout)".
std::string WaitingText(const control::JobStatus& status, int64_t now_ms);

// `hvdrun status JOB`: the job, its spec, and one line per rank.
std::string JobDetail(const control::JobStatus& status, int64_t now_ms);

// `hvdrun list`: one row per job.
std::string JobTable(const std::vector<control::JobStatus>& jobs, int64_t now_ms);

// `hvdrun agents`: one row per agent.
std::string AgentTable(const std::vector<control::AgentInfo>& agents, int64_t now_ms);

// "3.2 s" (base::SecondsText, as the launcher's messages), "4m05s", "2h03m"; "-" for negative.
std::string FormatDuration(int64_t ms);

}  // namespace hvd::cli
