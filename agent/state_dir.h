// What the agent keeps in --state-dir across restarts: the agent id the launcher assigned, so a
// restarted agent registers as the same agent and the launcher can reconcile its ranks.
#pragma once

#include <string>

#include "hvd/status.h"

namespace hvd::agent {

// Creates `state_dir` if needed and reads the saved id ("" when none). Empty dir: nothing.
Status LoadAgentId(const std::string& state_dir, std::string* id);
// Saves `id` atomically (write, then rename); failures are logged, not fatal.
void SaveAgentId(const std::string& state_dir, const std::string& id);

}  // namespace hvd::agent
