// The network parts of the REST answers (/v1/agents, /v1/jobs/{id}) as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "control/netif.h"

namespace hvd::launcherd {

nlohmann::json InterfacesJson(const std::vector<control::NetInterface>& interfaces);

}  // namespace hvd::launcherd
