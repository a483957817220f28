// What the agent keeps in --state-dir across restarts: the agent id the launcher assigned, so a
// restarted agent registers as the same agent and the launcher can reconcile its ranks; the key
// naming its cgroup directory (cgroup.h), so a restarted agent finds what its previous run left;
// and worker records (pid_records.h, in workers/).
#pragma once

#include <string>

#include "hvd/status.h"

namespace hvd::agent {

// Creates `state_dir` if needed and reads the saved id ("" when none). Empty dir: nothing.
Status LoadAgentId(const std::string& state_dir, std::string* id);
// Saves `id` atomically (write, then rename); failures are logged, not fatal.
void SaveAgentId(const std::string& state_dir, const std::string& id);

// Writes `content` to `path` atomically (a temporary file, then rename); errors name the file.
Status WriteFileAtomically(const std::string& path, const std::string& content);

// Reads <state_dir>/cgroup_key, creating it with a fresh random key the first time.
// REQUIRES: state_dir exists (LoadAgentId creates it).
Status LoadOrCreateCgroupKey(const std::string& state_dir, std::string* key);

}  // namespace hvd::agent
