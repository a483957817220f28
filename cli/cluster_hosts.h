// Cluster mode's host names: "localhost" (or ::1, 127.x.y.z) in -H/--hostfile means the host
// hvdrun runs on, but the agent there registered under its host name, so a job naming
// "localhost" would wait forever for an agent of that name. hvdrun run and hvdrun submit rename
// those entries before submitting.
#pragma once

#include <string>

#include "control/job_model.h"

namespace hvd::cli {

// Renames loopback entries of `spec`'s hosts to gethostname(); returns a note for --verbose (""
// when nothing was renamed).
std::string LocalhostToHostName(control::JobSpec* spec);

}  // namespace hvd::cli
