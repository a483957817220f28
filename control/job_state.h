// A job's and a rank's life, as domain enums with the hvd.v1 wire numbers, the allowed job
// transitions and the exit-code rule. Pure; the launcher's JobManager enforces them.
//
//   PENDING -> STARTING -> RUNNING -> SUCCEEDED | FAILED | CANCELLED
//   PENDING | STARTING -> FAILED | CANCELLED
//   STARTING | RUNNING -> RESTARTING -> PENDING (the next attempt) | FAILED | CANCELLED
//   SUCCEEDED, FAILED, CANCELLED are final.
#pragma once

#include <string>

#include "hvd/status.h"

namespace hvd::control {

// Values equal hvd.v1.JobState / hvd.v1.RankState (checked where they are translated).
enum class JobState {
  kUnspecified = 0,
  kPending = 1,
  kStarting = 2,
  kRunning = 3,
  kSucceeded = 4,
  kFailed = 5,
  kCancelled = 6,
  kRestarting = 7,  // an attempt failed and another is allowed: its ranks are being ended
};

enum class RankState {
  kUnspecified = 0,
  kPending = 1,        // placed, not yet sent to its agent
  kStarting = 2,       // sent to its agent
  kRunning = 3,        // its process exists
  kExited = 4,         // ended by itself: exit code or signal
  kFailedToStart = 5,  // exec failed
  kKilled = 6,         // ended by hvd (teardown, or its agent was lost)
};

const char* JobStateName(JobState s);  // "PENDING"
const char* RankStateName(RankState s);

bool IsTerminal(JobState s);
// Whether the rank's process is gone (or never existed): its slot is free again.
bool RankEnded(RankState s);

bool CanTransition(JobState from, JobState to);
// FailedPrecondition naming both states when `from -> to` is not allowed.
Status CheckTransition(JobState from, JobState to);

// What hvdrun exits with: 128+signal when a signal ended the process, else its exit code.
int ExitCodeFor(int exit_code, int signal);
// A job cancelled by a user exits like a shell job stopped with Ctrl-C.
inline constexpr int kCancelledExitCode = 130;
// A job that failed without a rank exit to blame (never fit, agent lost, launcher stopped).
inline constexpr int kGenericFailureExitCode = 1;

// "SIGKILL"; "signal 64" for numbers without a name.
std::string SignalName(int signal);

// One line for a rank's end: "rank 2 on host-b exited with code 3", "rank 0 on a was killed by
// SIGSEGV (signal 11)".
std::string DescribeRankExit(int rank, const std::string& host, int exit_code, int signal);

}  // namespace hvd::control
