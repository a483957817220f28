// MoveOffCpu: moving the calling thread to another CPU its affinity allows. Internal to
// transport/ (WaitReady's spin, link_transport.cc).
//
// Why: two ranks that hand small messages back and forth keep waking each other, and the
// scheduler's wake-up placement can keep both on one CPU while another allowed CPU sits idle,
// for a whole run: every hand-off then waits for a context switch (4 KiB allreduce about 5.5 us
// instead of 1.9 in half of twelve launches on the 2-vCPU VM, 10-16 us while the waits paused).
// A rank that finds the peer it waits for on its own CPU moves itself; the scheduler then leaves
// it where it lands.
#pragma once

#include <sched.h>

namespace hvd::runtime::transport {

// Moves the calling thread, now on `cpu`, to a CPU its affinity allows outside `taken` (the CPUs
// the host's other ranks last published; `cpu` is never chosen): narrows the affinity to those
// (the kernel migrates the thread before the call returns; which of them is the kernel's choice),
// then sets it back. At most one try per 100 ms per thread, so a scheduler that keeps putting the
// ranks back together costs little. Returns whether the thread moved; false when it is not on
// `cpu` any more or no such CPU is allowed.
//
// Setting the mask back makes the mask read before the move the thread's own: a thread that had
// none (all the cpuset's CPUs) does not gain CPUs a cpuset later adds. Should setting it back
// fail (the cpuset shrank in between), the thread gets every CPU, which the kernel limits to the
// cpuset.
bool MoveOffCpu(int cpu, const cpu_set_t& taken);

// How many times MoveOffCpu moved a thread of this process (diagnostics and tests).
long MovesOffCpu();

}  // namespace hvd::runtime::transport
