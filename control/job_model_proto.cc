#include "control/job_model_proto.h"

#include "control/job_state_proto.h"
#include "control/netif_proto.h"
#include "control/spec_limits.h"

namespace hvd::control {
namespace {

void ToProto(const JobFailure& f, v1::JobFailure* p) {
  p->set_rank(f.rank);
  p->set_host(f.host);
  p->set_exit_code(f.exit_code);
  p->set_signal(f.signal);
  p->set_stderr_tail(f.stderr_tail);
  p->set_message(f.message);
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

void ToProto(const RankSlot& s, v1::RankPlacement* p) {
  p->set_rank(s.rank);
  p->set_local_rank(s.local_rank);
  p->set_local_size(s.local_size);
  p->set_cross_rank(s.cross_rank);
  p->set_cross_size(s.cross_size);
  p->set_agent_id(s.agent_id);
  p->set_host(s.host);
  p->set_slot(s.slot);
}

RankSlot FromProto(const v1::RankPlacement& p) {
  RankSlot s;
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

void ToProto(const JobSpec& s, v1::JobSpec* p) {
  for (const std::string& a : s.argv) p->add_argv(a);
  p->set_np(s.np);
  for (const HostRequest& h : s.hosts) {
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
  p->set_gpu_isolation(s.gpu_isolation);
  if (IsElastic(s)) {
    p->set_min_np(s.min_np);
    p->set_max_np(s.max_np);
    p->set_elastic_timeout_ms(s.elastic_timeout_ms);
    p->set_reset_limit(s.reset_limit);
    p->set_cooldown_min_ms(s.cooldown_min_ms);
    p->set_cooldown_max_ms(s.cooldown_max_ms);
  }
}

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
  s.gpu_isolation = p.gpu_isolation();
  s.min_np = p.min_np();
  s.max_np = p.max_np();
  if (p.elastic_timeout_ms() > 0) s.elastic_timeout_ms = p.elastic_timeout_ms();
  s.reset_limit = p.reset_limit();
  s.cooldown_min_ms = p.cooldown_min_ms();
  s.cooldown_max_ms = p.cooldown_max_ms();
  return s;
}

JobStatus FromProto(const v1::JobStatus& p) {
  JobStatus s;
  s.id = p.id();
  s.spec = FromProto(p.spec());
  s.state = JobStateFromProto(p.state());
  s.reason = p.reason();
  for (const v1::RankStatus& rp : p.ranks()) {
    RankStatus r;
    r.placement = FromProto(rp.placement());
    r.state = RankStateFromProto(rp.state());
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
  if (p.has_elastic()) {
    const v1::ElasticStatus& e = p.elastic();
    s.elastic.generation = e.generation();
    s.elastic.workers.assign(e.workers().begin(), e.workers().end());
    s.elastic.resets = e.resets();
    s.elastic.below_min_since_ms = e.below_min_since_ms();
    for (const v1::MembershipEvent& ep : e.events()) {
      s.elastic.events.push_back({ep.generation(), ep.time_ms(),
                                  std::vector<int>(ep.workers().begin(), ep.workers().end()),
                                  ep.what()});
    }
  }
  return s;
}

void ToProto(const JobStatus& s, v1::JobStatus* p) {
  p->set_id(s.id);
  ToProto(s.spec, p->mutable_spec());
  p->set_state(JobStateToProto(s.state));
  p->set_reason(s.reason);
  for (const RankStatus& r : s.ranks) {
    v1::RankStatus* rp = p->add_ranks();
    ToProto(r.placement, rp->mutable_placement());
    rp->set_state(RankStateToProto(r.state));
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
  if (IsElastic(s.spec)) {
    v1::ElasticStatus* e = p->mutable_elastic();
    e->set_generation(s.elastic.generation);
    for (int w : s.elastic.workers) e->add_workers(w);
    e->set_resets(s.elastic.resets);
    e->set_below_min_since_ms(s.elastic.below_min_since_ms);
    for (const MembershipEvent& ev : s.elastic.events) {
      v1::MembershipEvent* ep = e->add_events();
      ep->set_generation(ev.generation);
      ep->set_time_ms(ev.time_ms);
      for (int w : ev.workers) ep->add_workers(w);
      ep->set_what(ev.what);
    }
  }
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
  spec->set_gpu_isolation(s.spec.gpu_isolation);
  spec->set_min_np(s.spec.min_np);
  spec->set_max_np(s.spec.max_np);
  if (IsElastic(s.spec)) {
    p->mutable_elastic()->set_generation(s.elastic.generation);
    for (int w : s.elastic.workers) p->mutable_elastic()->add_workers(w);
  }
  p->set_state(JobStateToProto(s.state));
  p->set_reason(s.reason);
  if (s.has_failure) {
    ToProto(s.failure, p->mutable_failure());
    p->mutable_failure()->clear_stderr_tail();
  }
  SetProgressFields(s, p);
}

OutputLine FromProto(const v1::OutputLine& p) {
  OutputLine l;
  l.rank = p.rank();
  l.is_stderr = p.stderr();
  l.text = p.text();
  l.seq = p.seq();
  return l;
}

void ToProto(const OutputLine& l, v1::OutputLine* p) {
  p->set_rank(l.rank);
  p->set_stderr(l.is_stderr);
  p->set_text(l.text);
  p->set_seq(l.seq);
}

bool FromProto(const v1::JobEvent& p, JobEvent* e) {
  *e = JobEvent();
  switch (p.event_case()) {
    case v1::JobEvent::kOutput:
      e->kind = JobEvent::Kind::kOutput;
      e->output = FromProto(p.output());
      return true;
    case v1::JobEvent::kStatus:
      e->kind = JobEvent::Kind::kStatus;
      e->status = FromProto(p.status());
      return true;
    case v1::JobEvent::kProgress:
      e->kind = JobEvent::Kind::kProgress;
      e->progress = p.progress();
      return true;
    default:
      return false;
  }
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

AgentInfo AgentInfoFromProto(const v1::AgentInfo& p) {
  AgentInfo a;
  a.id = p.agent_id();
  a.host = p.host();
  a.advertise_addr = p.advertise_addr();
  a.slots = p.slots();
  a.gpus = p.gpus();
  a.pid = p.pid();
  a.version = p.version();
  a.last_heartbeat_ms = p.last_heartbeat_ms();
  a.slots_in_use = p.slots_in_use();
  a.state = p.state();
  FromProto(p.interfaces(), &a.interfaces);
  a.advertise_iface = p.advertise_iface();
  a.lost_reason = p.lost_reason();
  return a;
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
  ToProto(a.interfaces, p->mutable_interfaces());
  p->set_advertise_iface(a.advertise_iface);
  p->set_lost_reason(a.lost_reason);
}

void ToProto(const NetworkReport& r, v1::NetworkReport* p) {
  p->set_decided(r.decided);
  p->set_ok(r.ok);
  p->set_summary(r.summary);
  p->set_chosen(r.chosen);
  for (const NetworkReport::HostChoice& h : r.hosts) {
    v1::NetworkReport::Host* q = p->add_hosts();
    q->set_host(h.host);
    q->set_agent_id(h.agent_id);
    q->set_iface(h.iface);
    q->set_address(h.address);
  }
  for (const NetworkReport::Dial& d : r.dials) {
    v1::NetworkReport::Dial* q = p->add_dials();
    q->set_candidate(d.candidate);
    q->set_from_host(d.from);
    q->set_to_host(d.to);
    q->set_address(d.address);
    q->set_ok(d.ok);
    q->set_error(d.error);
    q->set_micros(d.micros);
  }
  p->set_probe_ms(r.probe_ms);
}

NetworkReport FromProto(const v1::NetworkReport& p) {
  NetworkReport r;
  r.decided = p.decided();
  r.ok = p.ok();
  r.summary = p.summary();
  r.chosen = p.chosen();
  for (const v1::NetworkReport::Host& h : p.hosts()) {
    r.hosts.push_back({h.host(), h.agent_id(), h.iface(), h.address()});
  }
  for (const v1::NetworkReport::Dial& d : p.dials()) {
    r.dials.push_back(
        {d.candidate(), d.from_host(), d.to_host(), d.address(), d.ok(), d.error(), d.micros()});
  }
  r.probe_ms = p.probe_ms();
  return r;
}

Status ValidateJobSpec(const v1::JobSpec& p) {
  HVD_RETURN_IF_ERROR(ValidateJobSpec(FromProto(p)));
  // -1 set explicitly reads as "unset" in the domain spec: refused here, in the order and the
  // words ValidateJobSpec gives every other out-of-range value.
  if (p.has_kill_grace_ms()) {
    HVD_RETURN_IF_ERROR(CheckJobTimeoutMs("kill_grace_ms", "--kill-grace", p.kill_grace_ms()));
  }
  if (p.has_start_timeout_ms()) {
    HVD_RETURN_IF_ERROR(
        CheckJobTimeoutMs("start_timeout_ms", "--start-timeout", p.start_timeout_ms()));
  }
  if (p.has_stall_timeout_ms()) {
    HVD_RETURN_IF_ERROR(
        CheckJobTimeoutMs("stall_timeout_ms", "--stall-timeout", p.stall_timeout_ms()));
  }
  if (p.has_stdin_rank()) HVD_RETURN_IF_ERROR(CheckStdinRank(p.stdin_rank(), p.np()));
  return Status::OK();
}

Status ValidateAgentInfo(const v1::AgentInfo& p) {
  return ValidateAgentInfo(AgentInfoFromProto(p));
}

}  // namespace hvd::control
