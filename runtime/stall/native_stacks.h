// Where a stalled C++ rank is (docs/reliability.md, "Where a stalled rank is"): the launcher asks
// a stall's culprit for its stacks with the signal HVD_STACK_DUMP_SIGNAL (set by hvdrun's agent),
// which its agent sends only to processes that catch it. Python's binding registers faulthandler
// for it; a program without Python gets this handler from hvd::Init, and it writes the native
// stack of the thread the signal reached (the main thread, unless that one blocks the signal) to
// stderr, then every thread of the process by name and state, and the rank goes on.
//
// Why one thread's stack and not every thread's: a handler sees only its own stack, and making
// each thread write its own means signalling each, which cuts short system calls that user code
// may not retry (EINTR); the main thread is where a stalled program usually is, and the names and
// states (/proc/self/task) say what the others do.
#pragma once

#include <string>

namespace hvd::runtime::stall {

enum class NativeStacks {
  kOff,         // HVD_STACK_DUMP_SIGNAL unset or 0
  kInstalled,   // this process's handler for the signal (now or by an earlier Init)
  kHandled,     // the program (or a library) catches or ignores the signal: left to it
  kPython,      // the process runs Python: hvd's Python binding registers faulthandler instead
  kUnavailable  // sigaction failed, or the value is not a signal
};

// Installs the handler for the signal HVD_STACK_DUMP_SIGNAL names, once per process, unless the
// signal is taken already (see NativeStacks). `rank` is this process's rank now, for the dump's
// header (an elastic rank's number changes: each Init sets it). Thread-safe.
NativeStacks InstallNativeStackDump(int rank, std::string* detail);

}  // namespace hvd::runtime::stall
