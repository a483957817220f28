// The timeline file checked before anything starts, as --output-filename's directory is: rank 0
// opens it only after every rank has started and met, so a typo in its directory would
// otherwise surface as a runtime error minutes into the job.
#pragma once

#include <string>

#include "hvd/status.h"

namespace hvd::cli {

// Whether a process here could create or overwrite `path` (relative paths are taken from
// `working_dir`, where rank 0 runs): its directory must exist and be writable, and an existing
// `path` must be a writable file. "DYNAMIC" (nothing is written until start_timeline) passes.
// Errors are InvalidArgument naming `given_as` (what the user passed, e.g. "--timeline-filename",
// or "-x HVD_TIMELINE=": ending in '=', the path follows without a space), the path and the
// system's reason.
Status CheckTimelinePath(const std::string& given_as, const std::string& path,
                         const std::string& working_dir);

}  // namespace hvd::cli
