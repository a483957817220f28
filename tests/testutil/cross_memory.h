// Whether this host lets one process read a sibling's memory through the kernel
// (process_vm_readv, "cross memory attach"), which the single-copy allreduce needs; tests of that
// path skip with the reason where it is forbidden.
#pragma once

#include <string>

namespace hvd::testing {

// Empty when a forked child can read another forked child's memory; else why not (the errno,
// and what usually forbids it: Yama's ptrace_scope, a seccomp profile). Forks two children,
// reaps both, bounded to a few seconds.
std::string CrossMemoryUnavailable();

}  // namespace hvd::testing
