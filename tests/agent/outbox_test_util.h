// Shared by outbox_test.cc and outbox_ack_test.cc: a rank event of job "j" as Workers reports it.
#pragma once

#include "agent/outbox.h"
#include "control/job_state_proto.h"

namespace hvd::agent::outboxtest {

inline RankReport Event(int rank, hvd::v1::RankState state) {
  RankReport e;
  e.job_id = "j";
  e.rank = rank;
  e.state = control::RankStateFromProto(state);
  return e;
}

}  // namespace hvd::agent::outboxtest
