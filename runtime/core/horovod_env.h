// Horovod's environment variables that hvd does not implement. A Horovod user's job script sets
// them expecting an effect; hvd never accepts one silently: Init() warns about each, saying what
// hvd does instead (docs/configuration.md, "Horovod variables hvd does not read").
#pragma once

#include <string>
#include <vector>

namespace hvd::runtime::core {

// One message per HOROVOD_* variable in the environment that is neither a declared setting's
// alias nor read elsewhere by hvd, in environment order.
std::vector<std::string> UnimplementedHorovodVariables();

}  // namespace hvd::runtime::core
