// What a client may ask of the launcher, checked field by field where it enters: hvdrun checks a
// job spec before submitting it (cli/job_options.cc), and hvd-launcherd checks every job spec and
// every agent registration it receives over gRPC before anything else sees them
// (launcherd/launcher_service.cc, launcherd/agent_gateway_service.cc), with the same limits. A
// client that skips hvdrun's checks therefore gets the same refusal, naming the field and the
// limit, instead of a launcher that allocates or loops on a number it never bounded (issue 20,
// finding 4: one registration with slots=2147483647 used to wedge the launcher).
//
// The limits are far above any real use and low enough that one message stays well under gRPC's
// message limit and every sum fits an int. docs/security.md lists them.
#pragma once

#include <cstddef>
#include <cstdint>

#include <string>

#include "control/host_spec.h"
#include "control/job_model.h"
#include "hvd/status.h"

namespace hvd::control {

// Job specs.
inline constexpr int kMaxRanks = 1 << 20;           // np; the runtime's limit on HVD_SIZE
inline constexpr int kMaxHostEntries = 16384;       // entries of -H / --hostfile
inline constexpr size_t kMaxArgBytes = 128 << 10;   // one argument: Linux's MAX_ARG_STRLEN
inline constexpr size_t kMaxArgvBytes = 256 << 10;  // the whole command line
inline constexpr size_t kMaxArgvEntries = 16384;    // arguments
inline constexpr size_t kMaxEnvBytes = 512 << 10;   // every NAME=VALUE of the job's environment
inline constexpr size_t kMaxEnvEntries = 8192;      // variables
inline constexpr size_t kMaxEnvNameBytes = 4096;    // one variable's name
inline constexpr size_t kMaxPathBytes = 4096;       // working directory: PATH_MAX
inline constexpr size_t kMaxJobNameBytes = 256;     // --name
inline constexpr size_t kMaxInterfacesTextBytes = 1024;           // --network-interface
inline constexpr int64_t kMaxJobTimeoutMs = 30LL * 86400 * 1000;  // every *_ms limit: 30 days
inline constexpr int kMaxJobRestarts = 1000;                      // --max-restarts
inline constexpr size_t kMaxUserNameBytes = 32;                   // --run-as: useradd's limit

// Agent registrations.
inline constexpr size_t kMaxAgentIdBytes = 128;
inline constexpr size_t kMaxVersionBytes = 128;
inline constexpr size_t kMaxAdvertiseAddrBytes = 253;  // a host name or an IP address
inline constexpr int kMaxAgentInterfaces = 256;        // IPv4 addresses an agent lists
inline constexpr size_t kMaxInterfaceNameBytes = 64;   // "eth0", IFNAMSIZ is 16

// "256 KiB" for 262144, "512 B" otherwise.
std::string ByteSize(size_t bytes);

// Every field of a job spec against the limits above, and what the launcher needs anyway: a
// program, 1 <= np <= kMaxRanks, host names as -H accepts them (CheckHostName), each host
// 1..kMaxSlotsPerHost slots and named once, the hosts' total at least np, stdin_rank a rank of
// the job, limits >= 0. InvalidArgument names the field (and hvdrun's flag) and the limit. A
// limit or stdin_rank of -1 is "unset" (job_model.h); the wire's explicit -1 is refused by the
// edge's overload (job_model_proto.h).
Status ValidateJobSpec(const JobSpec& spec);

// The host list alone (ValidateJobSpec's check of -H): host names, slots, no host twice, at
// least np slots in all.
Status CheckHostList(const JobSpec& spec);

// An elastic job's numbers (--min-np, -np, --max-np, --elastic-timeout, --reset-limit); OK for a
// fixed job.
Status CheckElastic(const JobSpec& spec);

// Two of its checks, for that overload: a job limit `field` (given with hvdrun's `flag`) of
// 0..kMaxJobTimeoutMs, and --stdin naming a rank below `np`.
Status CheckJobTimeoutMs(const char* field, const char* flag, int64_t ms);
Status CheckStdinRank(int rank, int np);

// hvdrun --run-as USER: the form of a user name, before any host looks it up: 1..kMaxUserNameBytes
// of letters, digits, '.', '_' and '-', not starting with '-', optionally ending in '$' (what
// useradd and systemd accept), and not all digits (a uid is not a name: each host maps names to
// its own uids). Whether the user exists is for each agent's host to say.
Status CheckUserName(const std::string& name);

// An agent's registration: a host name as -H accepts it (so -H can name it), 1..kMaxSlotsPerHost
// slots (hvd-agent allows --slots up to 4096, hvdrun's embedded agent np), 0..kMaxSlotsPerHost
// GPUs, and every string and list within the limits above.
Status ValidateAgentInfo(const AgentInfo& info);

}  // namespace hvd::control
