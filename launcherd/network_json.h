// The network parts of the REST answers (/v1/agents, /v1/jobs/{id}) as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "control/iface_choice.h"
#include "control/netif.h"

namespace hvd::launcherd {

nlohmann::json InterfacesJson(const std::vector<control::NetInterface>& interfaces);
// null when nothing was decided (one host): the ranks use the agent's advertised address.
nlohmann::json NetworkReportJson(const control::NetworkReport& report);

}  // namespace hvd::launcherd
