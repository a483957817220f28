#include "launcherd/network_json.h"

namespace hvd::launcherd {

using nlohmann::json;

json InterfacesJson(const std::vector<control::NetInterface>& interfaces) {
  json list = json::array();
  for (const control::NetInterface& i : interfaces) {
    list.push_back({{"name", i.name},
                    {"address", i.address},
                    {"prefix_len", i.prefix_len},
                    {"up", i.up},
                    {"loopback", i.loopback}});
  }
  return list;
}

json NetworkReportJson(const control::NetworkReport& r) {
  if (!r.decided) return nullptr;
  json hosts = json::array();
  for (const control::NetworkReport::HostChoice& h : r.hosts) {
    hosts.push_back(
        {{"host", h.host}, {"agent_id", h.agent_id}, {"iface", h.iface}, {"address", h.address}});
  }
  json dials = json::array();
  for (const control::NetworkReport::Dial& d : r.dials) {
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

}  // namespace hvd::launcherd
