#include "launcherd/proto_convert.h"

#include "control/job_state_proto.h"

namespace hvd::launcherd {

RankEventReport FromProto(const v1::RankEvent& p) {
  RankEventReport e;
  e.job_id = p.job_id();
  e.attempt = p.attempt();
  e.rank = p.rank();
  e.state = control::RankStateFromProto(p.state());
  e.pid = p.pid();
  e.exit_code = p.exit_code();
  e.signal = p.signal();
  e.error = p.error();
  e.stderr_tail = p.stderr_tail();
  e.time_ms = p.time_ms();
  e.seq = p.seq();
  return e;
}

AgentInfo FromProto(const v1::AgentInfo& p) {
  AgentInfo a = control::AgentInfoFromProto(p);
  a.last_heartbeat_ms = 0;
  a.slots_in_use = 0;
  a.state.clear();
  return a;
}

void ToProto(const StartRankCommand& c, v1::StartRank* p) {
  p->set_job_id(c.job_id);
  p->set_attempt(c.attempt);
  ToProto(c.placement, p->mutable_placement());
  for (const std::string& a : c.argv) p->add_argv(a);
  for (const auto& [k, v] : c.env) (*p->mutable_env())[k] = v;
  p->set_working_dir(c.working_dir);
  p->set_forward_stdin(c.forward_stdin);
  p->set_run_as(c.run_as);
  p->set_gpu_isolation(c.gpu_isolation);
}

namespace {

// What StopJob and StopRanks share.
template <typename Stop>
void StopFields(const StopJobCommand& c, Stop* p) {
  p->set_job_id(c.job_id);
  p->set_reason(c.reason);
  p->set_grace_ms(c.grace_ms);
  p->set_signal(c.signal);
}

}  // namespace

void ToProto(const StopJobCommand& c, v1::StopJob* p) {
  StopFields(c, p);
}

void ToProto(const StopJobCommand& c, v1::StopRanks* p) {
  StopFields(c, p);
  p->set_attempt(c.attempt);
  for (int r : c.ranks) p->add_ranks(r);
}

void ToProto(const StackDumpCommand& c, v1::StackDump* p) {
  p->set_job_id(c.job_id);
  p->set_attempt(c.attempt);
  for (int r : c.ranks) p->add_ranks(r);
  p->set_signal(c.signal);
  p->set_reason(c.reason);
}

}  // namespace hvd::launcherd
