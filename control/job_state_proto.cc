#include "control/job_state_proto.h"

namespace hvd::control {

JobState JobStateFromProto(v1::JobState p) {
  switch (p) {
    case v1::PENDING:
      return JobState::kPending;
    case v1::STARTING:
      return JobState::kStarting;
    case v1::RUNNING:
      return JobState::kRunning;
    case v1::SUCCEEDED:
      return JobState::kSucceeded;
    case v1::FAILED:
      return JobState::kFailed;
    case v1::CANCELLED:
      return JobState::kCancelled;
    case v1::RESTARTING:
      return JobState::kRestarting;
    default:  // JOB_STATE_UNSPECIFIED, or a number this build does not know
      return JobState::kUnspecified;
  }
}

RankState RankStateFromProto(v1::RankState p) {
  switch (p) {
    case v1::RANK_PENDING:
      return RankState::kPending;
    case v1::RANK_STARTING:
      return RankState::kStarting;
    case v1::RANK_RUNNING:
      return RankState::kRunning;
    case v1::RANK_EXITED:
      return RankState::kExited;
    case v1::RANK_FAILED_TO_START:
      return RankState::kFailedToStart;
    case v1::RANK_KILLED:
      return RankState::kKilled;
    default:  // RANK_STATE_UNSPECIFIED, or a number this build does not know
      return RankState::kUnspecified;
  }
}

v1::JobState JobStateToProto(JobState s) {
  switch (s) {
    case JobState::kUnspecified:
      return v1::JOB_STATE_UNSPECIFIED;
    case JobState::kPending:
      return v1::PENDING;
    case JobState::kStarting:
      return v1::STARTING;
    case JobState::kRunning:
      return v1::RUNNING;
    case JobState::kSucceeded:
      return v1::SUCCEEDED;
    case JobState::kFailed:
      return v1::FAILED;
    case JobState::kCancelled:
      return v1::CANCELLED;
    case JobState::kRestarting:
      return v1::RESTARTING;
  }
  return v1::JOB_STATE_UNSPECIFIED;  // a value outside the enum
}

v1::RankState RankStateToProto(RankState s) {
  switch (s) {
    case RankState::kUnspecified:
      return v1::RANK_STATE_UNSPECIFIED;
    case RankState::kPending:
      return v1::RANK_PENDING;
    case RankState::kStarting:
      return v1::RANK_STARTING;
    case RankState::kRunning:
      return v1::RANK_RUNNING;
    case RankState::kExited:
      return v1::RANK_EXITED;
    case RankState::kFailedToStart:
      return v1::RANK_FAILED_TO_START;
    case RankState::kKilled:
      return v1::RANK_KILLED;
  }
  return v1::RANK_STATE_UNSPECIFIED;  // a value outside the enum
}

}  // namespace hvd::control
