#include "control/status_json.h"

#include "control/job_state.h"

namespace hvd::control {
namespace {

using nlohmann::json;

json RankJson(const v1::RankStatus& r) {
  const v1::RankPlacement& p = r.placement();
  return {{"rank", p.rank()},
          {"local_rank", p.local_rank()},
          {"local_size", p.local_size()},
          {"cross_rank", p.cross_rank()},
          {"cross_size", p.cross_size()},
          {"agent_id", p.agent_id()},
          {"host", p.host()},
          {"slot", p.slot()},
          {"state", RankStateName(static_cast<RankState>(r.state()))},
          {"pid", r.pid()},
          {"exit_code", r.exit_code()},
          {"signal", r.signal()},
          {"start_time_ms", r.start_time_ms()},
          {"end_time_ms", r.end_time_ms()},
          {"rendezvous_time_ms", r.rendezvous_time_ms()},
          {"error", r.error()}};
}

json FailureJson(const v1::JobFailure& f) {
  return {{"rank", f.rank()},     {"host", f.host()},       {"exit_code", f.exit_code()},
          {"signal", f.signal()}, {"message", f.message()}, {"stderr_tail", f.stderr_tail()}};
}

json InterfacesJson(const google::protobuf::RepeatedPtrField<v1::NetInterface>& interfaces) {
  json list = json::array();
  for (const v1::NetInterface& i : interfaces) {
    list.push_back({{"name", i.name()},
                    {"address", i.address()},
                    {"prefix_len", i.prefix_len()},
                    {"up", i.up()},
                    {"loopback", i.loopback()}});
  }
  return list;
}

// null when nothing was decided (one host): the ranks use the agent's advertised address.
json NetworkJson(const v1::NetworkReport& r) {
  if (!r.decided()) return nullptr;
  json hosts = json::array();
  for (const v1::NetworkReport::Host& h : r.hosts()) {
    hosts.push_back({{"host", h.host()},
                     {"agent_id", h.agent_id()},
                     {"iface", h.iface()},
                     {"address", h.address()}});
  }
  json dials = json::array();
  for (const v1::NetworkReport::Dial& d : r.dials()) {
    dials.push_back({{"network", d.candidate()},
                     {"from", d.from_host()},
                     {"to", d.to_host()},
                     {"address", d.address()},
                     {"ok", d.ok()},
                     {"error", d.error()},
                     {"micros", d.micros()}});
  }
  return {{"ok", r.ok()},   {"summary", r.summary()}, {"chosen", r.chosen()},
          {"hosts", hosts}, {"dials", dials},         {"probe_ms", r.probe_ms()}};
}

}  // namespace

json JobJson(const v1::JobStatus& s, bool full) {
  const v1::JobSpec& spec = s.spec();
  json j = {{"id", s.id()},
            {"name", spec.name()},
            {"state", JobStateName(static_cast<JobState>(s.state()))},
            {"reason", s.reason()},
            {"np", spec.np()},
            {"argv", json(std::vector<std::string>(spec.argv().begin(), spec.argv().end()))},
            {"submit_time_ms", s.submit_time_ms()},
            {"queued_since_ms", s.queued_since_ms()},
            {"start_time_ms", s.start_time_ms()},
            {"end_time_ms", s.end_time_ms()},
            {"exit_code", s.exit_code()},
            {"attempt", s.attempt()},
            {"stall", s.stall()},
            {"stall_since_ms", s.stall_since_ms()}};
  if (!full) return j;
  j["network"] = NetworkJson(s.network());
  json hosts = json::array();
  for (const v1::HostSlots& h : spec.hosts()) {
    hosts.push_back({{"host", h.host()}, {"slots", h.slots()}});
  }
  j["hosts"] = hosts;
  j["working_dir"] = spec.working_dir();
  j["detached"] = spec.detached();
  j["network_interfaces"] = spec.network_interfaces();
  // Unset limits are the launcher's defaults: null, not 0 (which means "no limit").
  j["kill_grace_ms"] = spec.has_kill_grace_ms() ? json(spec.kill_grace_ms()) : json(nullptr);
  j["start_timeout_ms"] =
      spec.has_start_timeout_ms() ? json(spec.start_timeout_ms()) : json(nullptr);
  j["stall_timeout_ms"] =
      spec.has_stall_timeout_ms() ? json(spec.stall_timeout_ms()) : json(nullptr);
  j["queue_timeout_ms"] = spec.queue_timeout_ms();
  json ranks = json::array();
  for (const v1::RankStatus& r : s.ranks()) ranks.push_back(RankJson(r));
  j["ranks"] = ranks;
  j["failure"] = s.has_failure() ? FailureJson(s.failure()) : json(nullptr);
  json previous = json::array();
  for (const v1::JobFailure& f : s.previous_failures()) previous.push_back(FailureJson(f));
  j["previous_failures"] = previous;
  j["max_restarts"] = spec.max_restarts();
  return j;
}

json AgentJson(const v1::AgentInfo& a) {
  return {{"id", a.agent_id()},
          {"host", a.host()},
          {"advertise_addr", a.advertise_addr()},
          {"advertise_iface", a.advertise_iface()},
          {"interfaces", InterfacesJson(a.interfaces())},
          {"slots", a.slots()},
          {"slots_in_use", a.slots_in_use()},
          {"gpus", a.gpus()},
          {"pid", a.pid()},
          {"version", a.version()},
          {"state", a.state()},
          {"last_heartbeat_ms", a.last_heartbeat_ms()}};
}

json JobListJson(const google::protobuf::RepeatedPtrField<v1::JobStatus>& jobs) {
  json list = json::array();
  for (const v1::JobStatus& s : jobs) list.push_back(JobJson(s, false));
  return json{{"jobs", list}};
}

json AgentListJson(const google::protobuf::RepeatedPtrField<v1::AgentInfo>& agents) {
  json list = json::array();
  for (const v1::AgentInfo& a : agents) list.push_back(AgentJson(a));
  return json{{"agents", list}};
}

std::string JsonText(const json& value) {
  return value.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace hvd::control
