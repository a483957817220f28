#include "launcherd/proto_convert.h"

#include "control/netif_proto.h"
#include "launcherd/network_convert.h"

namespace hvd::launcherd {
namespace {

// The domain enums carry the wire numbers; these catch a proto edit that breaks that.
static_assert(static_cast<int>(JobState::kCancelled) == v1::CANCELLED);
static_assert(static_cast<int>(JobState::kRestarting) == v1::RESTARTING);
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
  if (s.stdin_rank >= 0) p->set_stdin_rank(s.stdin_rank);
  if (s.kill_grace_ms >= 0) p->set_kill_grace_ms(s.kill_grace_ms);
  if (s.start_timeout_ms >= 0) p->set_start_timeout_ms(s.start_timeout_ms);
  if (s.stall_timeout_ms >= 0) p->set_stall_timeout_ms(s.stall_timeout_ms);
  p->set_max_restarts(s.max_restarts);
  p->set_queue_timeout_ms(s.queue_timeout_ms);
  p->set_run_as(s.run_as);
}

void ToProto(const JobFailure& f, v1::JobFailure* p) {
  p->set_rank(f.rank);
  p->set_host(f.host);
  p->set_exit_code(f.exit_code);
  p->set_signal(f.signal);
  p->set_stderr_tail(f.stderr_tail);
  p->set_message(f.message);
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
  if (p.has_kill_grace_ms()) s.kill_grace_ms = p.kill_grace_ms();
  if (p.has_start_timeout_ms()) s.start_timeout_ms = p.start_timeout_ms();
  if (p.has_stall_timeout_ms()) s.stall_timeout_ms = p.stall_timeout_ms();
  s.max_restarts = p.max_restarts();
  s.network_interfaces = p.network_interfaces();
  s.stdin_rank = p.has_stdin_rank() ? p.stdin_rank() : -1;
  s.queue_timeout_ms = p.queue_timeout_ms();
  s.run_as = p.run_as();
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
  e.time_ms = p.time_ms();
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

namespace {

control::RankSlot FromProto(const v1::RankPlacement& p) {
  control::RankSlot s;
  s.rank = p.rank();
  s.local_rank = p.local_rank();
  s.local_size = p.local_size();
  s.cross_rank = p.cross_rank();
  s.cross_size = p.cross_size();
  s.agent_id = p.agent_id();
  s.host = p.host();
  s.slot = p.slot();
  return s;
}

JobFailure FromProto(const v1::JobFailure& p) {
  JobFailure f;
  f.rank = p.rank();
  f.host = p.host();
  f.exit_code = p.exit_code();
  f.signal = p.signal();
  f.stderr_tail = p.stderr_tail();
  f.message = p.message();
  return f;
}

}  // namespace

JobStatus FromProto(const v1::JobStatus& p) {
  JobStatus s;
  s.id = p.id();
  s.spec = FromProto(p.spec());
  s.state = static_cast<JobState>(p.state());
  s.reason = p.reason();
  for (const v1::RankStatus& rp : p.ranks()) {
    RankStatus r;
    r.placement = FromProto(rp.placement());
    r.state = static_cast<RankState>(rp.state());
    r.pid = rp.pid();
    r.exit_code = rp.exit_code();
    r.signal = rp.signal();
    r.start_time_ms = rp.start_time_ms();
    r.end_time_ms = rp.end_time_ms();
    r.error = rp.error();
    r.rendezvous_time_ms = rp.rendezvous_time_ms();
    s.ranks.push_back(std::move(r));
  }
  s.has_failure = p.has_failure();
  if (s.has_failure) s.failure = FromProto(p.failure());
  s.submit_time_ms = p.submit_time_ms();
  s.start_time_ms = p.start_time_ms();
  s.end_time_ms = p.end_time_ms();
  s.exit_code = p.exit_code();
  s.attempt = p.attempt();
  s.stall = p.stall();
  s.stall_since_ms = p.stall_since_ms();
  for (const v1::JobFailure& f : p.previous_failures()) s.previous_failures.push_back(FromProto(f));
  if (p.has_network()) s.network = FromProto(p.network());
  s.queued_since_ms = p.queued_since_ms();
  return s;
}

namespace {
// The times, exit code, attempt and stall of a job: the same in a full record and a summary.
void SetProgressFields(const JobStatus& s, v1::JobStatus* p) {
  p->set_submit_time_ms(s.submit_time_ms);
  p->set_start_time_ms(s.start_time_ms);
  p->set_end_time_ms(s.end_time_ms);
  p->set_exit_code(s.exit_code);
  p->set_attempt(s.attempt);
  p->set_stall(s.stall);
  p->set_stall_since_ms(s.stall_since_ms);
  p->set_queued_since_ms(s.queued_since_ms);
}
}  // namespace

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
    rp->set_rendezvous_time_ms(r.rendezvous_time_ms);
  }
  if (s.has_failure) ToProto(s.failure, p->mutable_failure());
  SetProgressFields(s, p);
  for (const JobFailure& f : s.previous_failures) ToProto(f, p->add_previous_failures());
  ToProto(s.network, p->mutable_network());
}

void ToSummaryProto(const JobStatus& s, v1::JobStatus* p) {
  p->set_id(s.id);
  p->set_summarized(true);
  v1::JobSpec* spec = p->mutable_spec();
  size_t used = 0;
  for (const std::string& a : s.spec.argv) {
    if (used + a.size() <= kSummaryArgvBytes) {
      spec->add_argv(a);
      used += a.size();
      continue;
    }
    spec->add_argv(a.substr(0, kSummaryArgvBytes - used) + "...");
    break;
  }
  spec->set_np(s.spec.np);
  spec->set_working_dir(s.spec.working_dir);
  spec->set_name(s.spec.name);
  spec->set_detached(s.spec.detached);
  spec->set_max_restarts(s.spec.max_restarts);
  spec->set_run_as(s.spec.run_as);
  p->set_state(static_cast<v1::JobState>(s.state));
  p->set_reason(s.reason);
  if (s.has_failure) {
    ToProto(s.failure, p->mutable_failure());
    p->mutable_failure()->clear_stderr_tail();
  }
  SetProgressFields(s, p);
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
  p->set_forward_stdin(c.forward_stdin);
  p->set_run_as(c.run_as);
}

void ToProto(const StopJobCommand& c, v1::StopJob* p) {
  p->set_job_id(c.job_id);
  p->set_reason(c.reason);
  p->set_grace_ms(c.grace_ms);
  p->set_signal(c.signal);
}

}  // namespace hvd::launcherd
