// Where a stalled C++ rank is (docs/reliability.md, "Where a stalled rank is"): the launcher asks
// a stall's culprit for its stacks with the signal HVD_STACK_DUMP_SIGNAL (set by hvdrun's agent),
// which its agent sends only to processes that catch it. hvd::Init installs this handler, which
// writes the native stack of the thread the signal reached (the main thread, unless that one
// blocks the signal) to stderr, then every thread of the process by name and state, and the rank
// goes on. Python's binding replaces it with faulthandler (Python's frames say more there): it
// asks NativeStackDumpSignal (hvd_native_stack_dump_signal) whether the handler it finds is this
// one.
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
  kUnavailable  // sigaction failed, or the value is not a signal
};

// Installs the handler for the signal HVD_STACK_DUMP_SIGNAL names, once per process, unless the
// signal is taken already (see NativeStacks). `rank` is this process's rank now, for the dump's
// header (an elastic rank's number changes: each Init sets it). Thread-safe.
NativeStacks InstallNativeStackDump(int rank, std::string* detail);

// The signal this handler is the process's handler for now, else 0 (never installed, or replaced
// since: by Python's faulthandler, by the program).
int NativeStackDumpSignal();

}  // namespace hvd::runtime::stall
