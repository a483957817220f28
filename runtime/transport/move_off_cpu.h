// MoveOffCpu: moving the calling thread to another CPU its affinity allows, without changing that
// affinity. Internal to transport/ (WaitReady's spin, link_transport.cc).
//
// Why: two ranks that hand small messages back and forth keep waking each other, and the
// scheduler's wake-up placement can keep both on one CPU while another allowed CPU sits idle,
// for a whole run: every hand-off then waits for a context switch (4 KiB allreduce about 5.5 us
// instead of 1.9 in half of twelve launches on the 2-vCPU VM, 10-16 us while the waits paused).
// A rank that finds the peer it waits for on its own CPU moves itself; the scheduler then leaves
// it where it lands.
#pragma once

namespace hvd::runtime::transport {

// Moves the calling thread off `cpu` when its affinity allows another CPU: narrows the affinity to
// the others (the kernel migrates the thread before the call returns), then restores it (a thread
// already on an allowed CPU stays there). At most one try per 100 ms per thread, so a scheduler
// that keeps putting the ranks back together costs no more than that. Returns whether it moved.
bool MoveOffCpu(int cpu);

// How many times MoveOffCpu moved a thread of this process (diagnostics and tests).
long MovesOffCpu();

}  // namespace hvd::runtime::transport
