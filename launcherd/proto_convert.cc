#include "launcherd/proto_convert.h"

#include "control/netif_proto.h"
#include "launcherd/network_convert.h"

namespace hvd::launcherd {
namespace {

// The domain enums carry the wire numbers; these catch a proto edit that breaks that.
static_assert(static_cast<int>(JobState::kCancelled) == v1::CANCELLED);
static_assert(static_cast<int>(JobState::kPending) == v1::PENDING);
static_assert(static_cast<int>(RankState::kKilled) == v1::RANK_KILLED);
static_assert(static_cast<int>(RankState::kFailedToStart) == v1::RANK_FAILED_TO_START);

void ToProto(const control::RankSlot& s, v1::RankPlacement* p) {
  p->set_rank(s.rank);
  p->set_local_rank(s.local_rank);
  p->set_local_size(s.local_size);
  p->set_cross_rank(s.cross_rank);
  p->set_cross_size(s.cross_size);
  p->set_agent_id(s.agent_id);
  p->set_host(s.host);
  p->set_slot(s.slot);
}

void ToProto(const JobSpec& s, v1::JobSpec* p) {
  for (const std::string& a : s.argv) p->add_argv(a);
  p->set_np(s.np);
  for (const control::HostRequest& h : s.hosts) {
    v1::HostSlots* hp = p->add_hosts();
    hp->set_host(h.host);
    hp->set_slots(h.slots);
  }
  for (const auto& [k, v] : s.env) (*p->mutable_env())[k] = v;
  p->set_working_dir(s.working_dir);
  p->set_name(s.name);
  p->set_detached(s.detached);
  p->set_network_interfaces(s.network_interfaces);
}

void ToProto(const OutputLine& l, v1::OutputLine* p) {
  p->set_rank(l.rank);
  p->set_stderr(l.is_stderr);
  p->set_text(l.text);
  p->set_seq(l.seq);
}

}  // namespace

JobSpec FromProto(const v1::JobSpec& p) {
  JobSpec s;
  s.argv.assign(p.argv().begin(), p.argv().end());
  s.np = p.np();
  for (const v1::HostSlots& h : p.hosts()) s.hosts.push_back({h.host(), h.slots()});
  s.env.insert(p.env().begin(), p.env().end());
  s.working_dir = p.working_dir();
  s.name = p.name();
  s.detached = p.detached();
  s.network_interfaces = p.network_interfaces();
  return s;
}

RankEventReport FromProto(const v1::RankEvent& p) {
  RankEventReport e;
  e.job_id = p.job_id();
  e.attempt = p.attempt();
  e.rank = p.rank();
  e.state = static_cast<RankState>(p.state());
  e.pid = p.pid();
  e.exit_code = p.exit_code();
  e.signal = p.signal();
  e.error = p.error();
  e.stderr_tail = p.stderr_tail();
  return e;
}

AgentInfo FromProto(const v1::AgentInfo& p) {
  AgentInfo a;
  a.id = p.agent_id();
  a.host = p.host();
  a.advertise_addr = p.advertise_addr();
  a.slots = p.slots();
  a.gpus = p.gpus();
  a.pid = p.pid();
  a.version = p.version();
  control::FromProto(p.interfaces(), &a.interfaces);
  a.advertise_iface = p.advertise_iface();
  return a;
}

OutputLine FromProto(const v1::OutputLine& p) {
  OutputLine l;
  l.rank = p.rank();
  l.is_stderr = p.stderr();
  l.text = p.text();
  return l;  // seq is the launcher's to assign
}

void ToProto(const JobStatus& s, v1::JobStatus* p) {
  p->set_id(s.id);
  ToProto(s.spec, p->mutable_spec());
  p->set_state(static_cast<v1::JobState>(s.state));
  p->set_reason(s.reason);
  for (const RankStatus& r : s.ranks) {
    v1::RankStatus* rp = p->add_ranks();
    ToProto(r.placement, rp->mutable_placement());
    rp->set_state(static_cast<v1::RankState>(r.state));
    rp->set_pid(r.pid);
    rp->set_exit_code(r.exit_code);
    rp->set_signal(r.signal);
    rp->set_start_time_ms(r.start_time_ms);
    rp->set_end_time_ms(r.end_time_ms);
    rp->set_error(r.error);
  }
  if (s.has_failure) {
    v1::JobFailure* f = p->mutable_failure();
    f->set_rank(s.failure.rank);
    f->set_host(s.failure.host);
    f->set_exit_code(s.failure.exit_code);
    f->set_signal(s.failure.signal);
    f->set_stderr_tail(s.failure.stderr_tail);
    f->set_message(s.failure.message);
  }
  p->set_submit_time_ms(s.submit_time_ms);
  p->set_start_time_ms(s.start_time_ms);
  p->set_end_time_ms(s.end_time_ms);
  p->set_exit_code(s.exit_code);
  p->set_attempt(s.attempt);
  ToProto(s.network, p->mutable_network());
}

void ToProto(const JobEvent& e, v1::JobEvent* p) {
  switch (e.kind) {
    case JobEvent::Kind::kOutput:
      ToProto(e.output, p->mutable_output());
      break;
    case JobEvent::Kind::kStatus:
      ToProto(e.status, p->mutable_status());
      break;
    case JobEvent::Kind::kProgress:
      p->set_progress(e.progress);
      break;
  }
}

void ToProto(const AgentInfo& a, v1::AgentInfo* p) {
  p->set_agent_id(a.id);
  p->set_host(a.host);
  p->set_advertise_addr(a.advertise_addr);
  p->set_slots(a.slots);
  p->set_gpus(a.gpus);
  p->set_pid(a.pid);
  p->set_version(a.version);
  p->set_last_heartbeat_ms(a.last_heartbeat_ms);
  p->set_slots_in_use(a.slots_in_use);
  p->set_state(a.state);
  control::ToProto(a.interfaces, p->mutable_interfaces());
  p->set_advertise_iface(a.advertise_iface);
}

void ToProto(const StartRankCommand& c, v1::StartRank* p) {
  p->set_job_id(c.job_id);
  p->set_attempt(c.attempt);
  ToProto(c.placement, p->mutable_placement());
  for (const std::string& a : c.argv) p->add_argv(a);
  for (const auto& [k, v] : c.env) (*p->mutable_env())[k] = v;
  p->set_working_dir(c.working_dir);
}

void ToProto(const StopJobCommand& c, v1::StopJob* p) {
  p->set_job_id(c.job_id);
  p->set_reason(c.reason);
  p->set_grace_ms(c.grace_ms);
}

}  // namespace hvd::launcherd
