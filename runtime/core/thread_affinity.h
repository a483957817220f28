// Horovod's HOROVOD_THREAD_AFFINITY (hvdrun/horovodrun --thread-affinity), read as
// HVD_THREAD_AFFINITY with the Horovod name accepted: a comma-separated CPU per local rank
// ("0,1,2,3"), on which that rank's background thread (the engine's negotiation and collective
// loop) runs. Unset: the thread runs wherever the rank's own binding lets it.
#pragma once

#include <functional>
#include <string>

#include "hvd/status.h"

namespace hvd::runtime::core {

// The CPU of local rank `local_rank`'s background thread from `value` (one CPU per local rank);
// -1 when `value` is empty. InvalidArgument naming the variable and the entry when it is not one
// CPU per local rank.
Status ParseThreadAffinity(const std::string& variable, const std::string& value, int local_rank,
                           int local_size, int* cpu);

// Pins the calling thread as the environment says (HVD_THREAD_AFFINITY, else
// HOROVOD_THREAD_AFFINITY; local rank and size from HVD_LOCAL_RANK / HVD_LOCAL_SIZE), logging a
// warning when the value is wrong or the system refuses the CPU: a bad affinity costs speed, it
// does not fail the job. `getenv` is injectable for tests. Returns the CPU pinned to, or -1.
int PinBackgroundThread(const std::function<const char*(const char*)>& getenv);

}  // namespace hvd::runtime::core
