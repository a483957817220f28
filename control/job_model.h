// The job model both ends of the Launcher service work with: a job's spec, its status with its
// ranks and failures, an output line, a WatchJob event and an agent as listed. hvd-launcherd keeps
// and decides on these (launcherd/job_types.h adds what only the launcher needs); hvdrun builds a
// spec and prints statuses from them. Only the gRPC edges see hvd.v1 messages: the launcher's
// services and hvdrun's client translate with control/job_model_proto.h. Plain structs, no
// protobuf.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "control/iface_choice.h"
#include "control/job_state.h"
#include "control/netif.h"
#include "control/placement.h"

namespace hvd::control {

struct JobSpec {
  std::vector<std::string> argv;  // argv[0] is the program; never run through a shell
  int np = 0;
  std::vector<HostRequest> hosts;          // empty: any free slots
  std::map<std::string, std::string> env;  // -x
  std::string working_dir;
  std::string name;
  bool detached = false;
  // -1: the launcher's default (JobManagerOptions).
  int64_t kill_grace_ms = -1;
  int64_t start_timeout_ms = -1;  // 0: no limit
  int64_t stall_timeout_ms = -1;  // 0: stalls are reported, never fatal
  int max_restarts = 0;
  std::string network_interfaces;  // --network-interface; "": any that works
  int stdin_rank = -1;             // hvdrun --stdin: the rank reading hvdrun's stdin; -1: none
  int64_t queue_timeout_ms = 0;    // --queue-timeout; 0: wait for slots as long as it takes
  std::string run_as;              // --run-as: the user the ranks run as; "": the agent's
  bool gpu_isolation = false;      // --gpu-isolation: each rank sees only its slot's GPU
  // Elastic (--min-np/--max-np, docs/elastic.md): min_np > 0 makes the job elastic; np is then
  // how many workers it starts with.
  int min_np = 0;
  int max_np = 0;
  int64_t elastic_timeout_ms = 600000;  // --elastic-timeout: below min_np this long fails it
  int reset_limit = 0;                  // --reset-limit: membership changes allowed; 0: any
  // --blacklist-cooldown-range MIN MAX: an excluded host comes back after MIN s, doubling per
  // exclusion up to MAX; 0: excluded for the job's life.
  int64_t cooldown_min_ms = 0;
  int64_t cooldown_max_ms = 0;
};

inline bool IsElastic(const JobSpec& spec) {
  return spec.min_np > 0;
}

struct RankStatus {
  RankSlot placement;
  RankState state = RankState::kPending;
  int pid = 0;
  int exit_code = 0;
  int signal = 0;
  int64_t start_time_ms = 0;
  int64_t end_time_ms = 0;
  std::string error;
  int64_t rendezvous_time_ms = 0;  // when it reached the rendezvous; 0: not yet
};

// A rank whose process may exist: sent to its agent and not reported gone.
inline bool RankLive(RankState s) {
  return s == RankState::kStarting || s == RankState::kRunning;
}

// "rank 3" or "ranks 0, 2" (`word` false: "3" or "0, 2").
inline std::string RankList(const std::vector<int>& ranks, bool word = true) {
  std::string out = !word ? "" : ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// How many of a rank's last stderr lines a failure carries: those its agent kept of a rank that
// exited, or those the launcher's log holds of one still running (a stall's culprit).
inline constexpr size_t kStderrTailLines = 20;

// The signal that asks a stalled rank for its stacks (hvd.v1.StackDump; the workers' environment
// names it as HVD_STACK_DUMP_SIGNAL). A real-time signal (SIGRTMIN + 6 with glibc, within musl's
// range too) that programs rarely take for themselves; its default action ends a process, so an
// agent sends it only to processes that catch it.
inline constexpr int kStackDumpSignal = 40;

struct JobFailure {
  int rank = -1;  // -1: no rank to blame (the job never fit, the launcher stopped)
  std::string host;
  int exit_code = 0;
  int signal = 0;
  std::string stderr_tail;
  std::string message;  // one line: "rank 2 on host-b exited with code 3"
};

// One change of an elastic job's membership (a new generation, or the job falling below
// --min-np): when, the generation's workers (ids, in rank order), and what happened.
struct MembershipEvent {
  int64_t generation = 0;  // the generation in force after the event
  int64_t time_ms = 0;
  std::vector<int> workers;  // empty when the generation has more than 64
  std::string what;          // "worker 3 on host-b left: exited with signal 9 (SIGKILL)"
};

struct ElasticStatus {
  int64_t generation = -1;              // the newest published; -1: none yet
  std::vector<int> workers;             // its workers
  int resets = 0;                       // generations after the first
  int64_t below_min_since_ms = 0;       // fewer live workers than --min-np since; 0: not below
  std::vector<MembershipEvent> events;  // the newest 100
};

struct JobStatus {
  std::string id;
  JobSpec spec;
  JobState state = JobState::kPending;
  std::string reason;  // why PENDING, or why it ended
  std::vector<RankStatus> ranks;
  bool has_failure = false;
  JobFailure failure;
  int64_t submit_time_ms = 0;
  int64_t start_time_ms = 0;
  int64_t end_time_ms = 0;
  int exit_code = 0;
  int attempt = 0;
  std::string stall;  // what the runtime reports as not progressing; empty: nothing
  int64_t stall_since_ms = 0;
  std::vector<JobFailure> previous_failures;  // of earlier attempts, in order
  NetworkReport network;                      // how its hosts reach each other (iface_choice.h)
  // Wall clock when it last entered PENDING: how long it has waited for slots (--queue-timeout).
  int64_t queued_since_ms = 0;
  ElasticStatus elastic;  // elastic jobs only
};

inline bool AnyRankLive(const JobStatus& job) {
  for (const RankStatus& r : job.ranks) {
    if (RankLive(r.state)) return true;
  }
  return false;
}

struct OutputLine {
  int rank = 0;
  bool is_stderr = false;
  std::string text;
  int64_t seq = -1;  // position in the job's output log; set by the launcher
};

// How two of WatchJob's progress notes begin, which a watcher reads (cli/follow.cc): output the
// watcher fell behind and the launcher no longer had ("output dropped: " and why), and output
// numbered anew after a launcher restart, whose seq jumps (not lines dropped).
inline constexpr std::string_view kOutputDroppedNote = "output dropped: ";
inline constexpr std::string_view kOutputRenumberedNote = "output renumbered: ";
// And a third, said whether or not the watcher is verbose: a stalled rank was asked for its
// stacks (they follow on its stderr).
inline constexpr std::string_view kStacksAskedNote = "stacks: ";

// One item of WatchJob's stream.
struct JobEvent {
  enum class Kind { kOutput, kStatus, kProgress };
  Kind kind = Kind::kProgress;
  OutputLine output;
  JobStatus status;
  std::string progress;
};

// An agent as registered and as listed (hvd.v1.AgentInfo).
struct AgentInfo {
  std::string id;
  std::string host;
  std::string advertise_addr;
  int slots = 0;
  int gpus = 0;
  int pid = 0;
  std::string version;
  int64_t last_heartbeat_ms = 0;  // wall clock
  int slots_in_use = 0;           // filled by whoever combines registry and jobs
  // "READY", "DISCONNECTED" (stream gone, lease running), "LOST", "STOPPED" (said goodbye)
  std::string state;
  std::vector<NetInterface> interfaces;  // every IPv4 address of its host
  std::string advertise_iface;           // the interface holding advertise_addr
  // Set once LOST (AgentRegistry::ExpireLeases) or STOPPED (its goodbye's reason): how it went,
  // for the jobs it ran ranks of.
  std::string lost_reason;
};

}  // namespace hvd::control
