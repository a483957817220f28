#include "control/status_json.h"

#include "control/job_state.h"

namespace hvd::control {
namespace {

using nlohmann::json;

json RankJson(const RankStatus& r) {
  const RankSlot& p = r.placement;
  return {{"rank", p.rank},
          {"local_rank", p.local_rank},
          {"local_size", p.local_size},
          {"cross_rank", p.cross_rank},
          {"cross_size", p.cross_size},
          {"agent_id", p.agent_id},
          {"host", p.host},
          {"slot", p.slot},
          {"state", RankStateName(r.state)},
          {"pid", r.pid},
          {"exit_code", r.exit_code},
          {"signal", r.signal},
          {"start_time_ms", r.start_time_ms},
          {"end_time_ms", r.end_time_ms},
          {"rendezvous_time_ms", r.rendezvous_time_ms},
          {"error", r.error}};
}

json FailureJson(const JobFailure& f) {
  return {{"rank", f.rank},     {"host", f.host},       {"exit_code", f.exit_code},
          {"signal", f.signal}, {"message", f.message}, {"stderr_tail", f.stderr_tail}};
}

json InterfacesJson(const std::vector<NetInterface>& interfaces) {
  json list = json::array();
  for (const NetInterface& i : interfaces) {
    list.push_back({{"name", i.name},
                    {"address", i.address},
                    {"prefix_len", i.prefix_len},
                    {"up", i.up},
                    {"loopback", i.loopback}});
  }
  return list;
}

// null when nothing was decided (one host): the ranks use the agent's advertised address.
json NetworkJson(const NetworkReport& r) {
  if (!r.decided) return nullptr;
  json hosts = json::array();
  for (const NetworkReport::HostChoice& h : r.hosts) {
    hosts.push_back(
        {{"host", h.host}, {"agent_id", h.agent_id}, {"iface", h.iface}, {"address", h.address}});
  }
  json dials = json::array();
  for (const NetworkReport::Dial& d : r.dials) {
    dials.push_back({{"network", d.candidate},
                     {"from", d.from},
                     {"to", d.to},
                     {"address", d.address},
                     {"ok", d.ok},
                     {"error", d.error},
                     {"micros", d.micros}});
  }
  return {{"ok", r.ok},     {"summary", r.summary}, {"chosen", r.chosen},
          {"hosts", hosts}, {"dials", dials},       {"probe_ms", r.probe_ms}};
}

// Unset limits (-1) are the launcher's defaults: null, not 0 (which means "no limit").
json LimitJson(int64_t ms) {
  return ms >= 0 ? json(ms) : json(nullptr);
}

}  // namespace

// An elastic job's numbers and membership (docs/elastic.md); ranks are listed by worker id.
json ElasticJson(const JobStatus& s) {
  const ElasticStatus& e = s.elastic;
  json events = json::array();
  for (const MembershipEvent& ev : e.events) {
    events.push_back({{"generation", ev.generation},
                      {"time_ms", ev.time_ms},
                      {"workers", json(ev.workers)},
                      {"what", ev.what}});
  }
  return {{"min_np", s.spec.min_np},
          {"max_np", s.spec.max_np},
          {"elastic_timeout_ms", s.spec.elastic_timeout_ms},
          {"reset_limit", s.spec.reset_limit},
          {"generation", e.generation},
          {"workers", json(e.workers)},
          {"resets", e.resets},
          {"below_min_since_ms", e.below_min_since_ms},
          {"events", events}};
}

json JobJson(const JobStatus& s, bool full) {
  const JobSpec& spec = s.spec;
  json j = {{"id", s.id},
            {"name", spec.name},
            {"state", JobStateName(s.state)},
            {"reason", s.reason},
            {"np", spec.np},
            {"argv", json(spec.argv)},
            {"submit_time_ms", s.submit_time_ms},
            {"queued_since_ms", s.queued_since_ms},
            {"start_time_ms", s.start_time_ms},
            {"end_time_ms", s.end_time_ms},
            {"exit_code", s.exit_code},
            {"attempt", s.attempt},
            {"stall", s.stall},
            {"stall_since_ms", s.stall_since_ms}};
  if (!full) return j;
  j["network"] = NetworkJson(s.network);
  json hosts = json::array();
  for (const HostRequest& h : spec.hosts) hosts.push_back({{"host", h.host}, {"slots", h.slots}});
  j["hosts"] = hosts;
  j["working_dir"] = spec.working_dir;
  j["run_as"] = spec.run_as;  // --run-as; "": the agent's own user
  j["detached"] = spec.detached;
  j["network_interfaces"] = spec.network_interfaces;
  j["kill_grace_ms"] = LimitJson(spec.kill_grace_ms);
  j["start_timeout_ms"] = LimitJson(spec.start_timeout_ms);
  j["stall_timeout_ms"] = LimitJson(spec.stall_timeout_ms);
  j["queue_timeout_ms"] = spec.queue_timeout_ms;
  json ranks = json::array();
  for (const RankStatus& r : s.ranks) ranks.push_back(RankJson(r));
  j["ranks"] = ranks;
  j["failure"] = s.has_failure ? FailureJson(s.failure) : json(nullptr);
  json previous = json::array();
  for (const JobFailure& f : s.previous_failures) previous.push_back(FailureJson(f));
  j["previous_failures"] = previous;
  j["max_restarts"] = spec.max_restarts;
  if (IsElastic(spec)) j["elastic"] = ElasticJson(s);
  return j;
}

json AgentJson(const AgentInfo& a) {
  return {{"id", a.id},
          {"host", a.host},
          {"advertise_addr", a.advertise_addr},
          {"advertise_iface", a.advertise_iface},
          {"interfaces", InterfacesJson(a.interfaces)},
          {"slots", a.slots},
          {"slots_in_use", a.slots_in_use},
          {"gpus", a.gpus},
          {"pid", a.pid},
          {"version", a.version},
          {"state", a.state},
          {"lost_reason", a.lost_reason},
          {"last_heartbeat_ms", a.last_heartbeat_ms}};
}

json JobListJson(const std::vector<JobStatus>& jobs) {
  json list = json::array();
  for (const JobStatus& s : jobs) list.push_back(JobJson(s, false));
  return json{{"jobs", list}};
}

json AgentListJson(const std::vector<AgentInfo>& agents) {
  json list = json::array();
  for (const AgentInfo& a : agents) list.push_back(AgentJson(a));
  return json{{"agents", list}};
}

std::string JsonText(const json& value) {
  return value.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace hvd::control
