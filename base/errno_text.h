// errno as people read it in an error message: the text and the symbolic name, so that a report
// can be searched for ("Connection refused (ECONNREFUSED)"). Used by every syscall error message of
// the runtime and the control plane.
#pragma once

#include <string>

namespace hvd::base {

// "No such file or directory (ENOENT)"; the text alone for a value with no known name.
std::string ErrnoText(int err);

}  // namespace hvd::base
