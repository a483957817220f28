#include "control/job_state.h"

#include <csignal>

namespace hvd::control {

const char* JobStateName(JobState s) {
  switch (s) {
    case JobState::kUnspecified:
      return "UNSPECIFIED";
    case JobState::kPending:
      return "PENDING";
    case JobState::kStarting:
      return "STARTING";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kSucceeded:
      return "SUCCEEDED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
    case JobState::kRestarting:
      return "RESTARTING";
  }
  return "UNKNOWN";
}

const char* RankStateName(RankState s) {
  switch (s) {
    case RankState::kUnspecified:
      return "UNSPECIFIED";
    case RankState::kPending:
      return "PENDING";
    case RankState::kStarting:
      return "STARTING";
    case RankState::kRunning:
      return "RUNNING";
    case RankState::kExited:
      return "EXITED";
    case RankState::kFailedToStart:
      return "FAILED_TO_START";
    case RankState::kKilled:
      return "KILLED";
  }
  return "UNKNOWN";
}

bool IsTerminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

bool RankEnded(RankState s) {
  return s == RankState::kExited || s == RankState::kFailedToStart || s == RankState::kKilled;
}

bool CanTransition(JobState from, JobState to) {
  const bool ends = to == JobState::kFailed || to == JobState::kCancelled;
  switch (from) {
    case JobState::kPending:
      return to == JobState::kStarting || ends;
    case JobState::kStarting:
      return to == JobState::kRunning || to == JobState::kRestarting || ends;
    case JobState::kRunning:
      return to == JobState::kSucceeded || to == JobState::kRestarting || ends;
    case JobState::kRestarting:
      return to == JobState::kPending || ends;
    default:
      return false;  // unspecified is never a real state; terminal states are final
  }
}

Status CheckTransition(JobState from, JobState to) {
  if (CanTransition(from, to)) return Status::OK();
  return FailedPrecondition(std::string("job state ") + JobStateName(from) + " cannot become " +
                            JobStateName(to) + (IsTerminal(from) ? " (it already ended)" : ""));
}

int ExitCodeFor(int exit_code, int signal) {
  return signal > 0 ? 128 + signal : exit_code;
}

std::string SignalName(int signal) {
  static const std::pair<int, const char*> kNames[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"},
  };
  for (const auto& [n, name] : kNames) {
    if (n == signal) return name;
  }
  return "signal " + std::to_string(signal);
}

std::string DescribeRankExit(int rank, const std::string& host, int exit_code, int signal) {
  std::string s = "rank " + std::to_string(rank) + " on " + host;
  if (signal > 0) {
    return s + " was killed by " + SignalName(signal) + " (signal " + std::to_string(signal) + ")";
  }
  return s + " exited with code " + std::to_string(exit_code);
}

}  // namespace hvd::control
