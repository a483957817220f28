// Asking a stalled rank where it is: the launcher's StackDump (hvd.v1.StackDump) becomes a signal
// to the rank's processes that catch it. hvd.torch registers Python's faulthandler for
// control::kStackDumpSignal, which writes the stacks of all threads to the rank's stderr, and
// hvd::Init in a C++ program a handler that writes its main thread's native stack
// (runtime/stall/native_stacks.h); the agent forwards them as any other output. The signal's
// default action would end a process, so a process without a handler for it is never sent it.
#pragma once

#include <sys/types.h>

#include <vector>

namespace hvd::agent {

// The processes of the worker's process group (led by `leader`) that catch `signal` and whose
// parent does not: the rank's own process, not the children it forked (a DataLoader's workers),
// which inherit its handlers. Empty when none catches it (a program without hvd.torch).
std::vector<pid_t> StackDumpTargets(pid_t leader, int signal);

// Sends `signal` to StackDumpTargets(leader, signal); returns those it was sent to.
std::vector<pid_t> SendStackDump(pid_t leader, int signal);

}  // namespace hvd::agent
