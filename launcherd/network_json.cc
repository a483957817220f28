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

}  // namespace hvd::launcherd
