// What an agent does at start about its previous run with the same --state-dir, which was
// SIGKILLed or crashed and whose worker wrappers could not all clean up.
#pragma once

#include "agent/agent.h"
#include "agent/workers.h"
#include "hvd/status.h"

namespace hvd::agent {

// Opens the job cgroups and the worker records (filling workers->records_dir and
// workers->cgroups), and kills what a previous run left alive: the processes its records name
// and every job cgroup under its key. Without cgroups (unavailable or options.use_cgroups off)
// jobs run without them, which is logged. Errors: an unreadable state dir or cgroup key.
Status CleanUpPreviousRun(const AgentOptions& options, WorkersOptions* workers);

}  // namespace hvd::agent
