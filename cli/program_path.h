// hvdrun's program path (program_path.cc): argv[0] resolved as a shell would resolve it.
#pragma once

#include <string>

#include "hvd/status.h"

namespace hvd::cli {

// `rel` under `dir`, leading "./" dropped (tidier paths in logs).
std::string JoinPath(const std::string& dir, const std::string& rel);

// Resolves argv[0]: without '/', searched in `path_var` as a shell does (only when `check`);
// relative with '/', made absolute against `working_dir`. With `check`, the result must be an
// executable regular file.
Status ResolveProgram(const std::string& program, const std::string& working_dir,
                      const std::string& path_var, bool check, std::string* resolved);

}  // namespace hvd::cli
