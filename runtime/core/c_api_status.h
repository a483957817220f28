// What the C ABI's translation units (core/c_api.cc, c_api_sets.cc) share. Not exported.
#pragma once

#include "hvd/status.h"

namespace hvd::internal {

// The C ABI's status code for `s`, its message kept as this thread's hvd_last_error().
int ReportToC(const Status& s);

}  // namespace hvd::internal
