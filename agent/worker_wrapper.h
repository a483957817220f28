// The worker wrapper: a small supervisor process the agent puts between itself and each worker,
// so that no process of a job can outlive the agent, whatever kills it.
//
// hvd-agent (and hvdrun, whose embedded agent does the same) re-executes its own binary with
// argv[1] == kWorkerWrapperFlag; main() hands such a process to RunWorkerWrapperIfAsked before
// anything else. The wrapper:
//   - becomes a child subreaper, so every descendant of the worker that is orphaned (a daemonized
//     data loader whose parent exited) is re-parented to it instead of to init;
//   - forks the worker into its own process group, with PR_SET_PDEATHSIG(SIGKILL) tied to the
//     wrapper, joins it to the rank's cgroup (when the agent has one), switches it to the job's
//     user (--run-as: supplementary groups, gid, uid, then HOME/USER/LOGNAME and the working
//     directory checked as that user) and execs it. The wrapper itself stays root, so it can
//     still kill the worker's group and cgroup and remove the cgroup;
//   - watches the lifeline: the read end of a pipe whose only write end the agent holds. EOF (or
//     SIGHUP, its own parent-death signal) means the agent is gone: SIGKILL to the worker's group,
//     its cgroup and every descendant, then exit;
//   - when the worker exits: the same cleanup, then reports the worker's exit to the agent.
// SIGTERM or SIGINT sent to the wrapper itself are forwarded to the worker's group.
//
// Descriptors, fixed by the agent at exec time:
//   3 - status pipe (write end): WrapperReport records, in order: kStarted or kExecFailed, then
//       kExited.
//   4 - lifeline (read end).
// argv: <exe> --hvd-worker-wrapper-v1 <cgroup procs file, or ""> [--run-as USER] -- <program>
// [args...] (a wrapper of a version without --run-as refuses that form instead of ignoring it).
// The environment is the worker's; the working directory is already the worker's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hvd/status.h"

namespace hvd::agent {

// Versioned: a wrapper binary left over from another version does not recognize it and refuses
// to run, rather than speaking a different fd protocol.
inline constexpr char kWorkerWrapperFlag[] = "--hvd-worker-wrapper-v1";
inline constexpr int kWrapperStatusFd = 3;
inline constexpr int kWrapperLifelineFd = 4;

struct WrapperReport {
  enum Kind : int32_t { kStarted = 1, kExecFailed = 2, kExited = 3 };
  int32_t kind = 0;
  int32_t a = 0;  // kStarted: the worker's pid; kExecFailed: errno; kExited: exit code
  int32_t b = 0;  // kExited: the signal that ended it (0: it exited); kExecFailed: a Stage
  int32_t unused = 0;
  int64_t time_ms = 0;  // kExited: wall-clock ms when the wrapper saw the worker end
};

// What failed before the worker ran (WrapperReport::b of kExecFailed; `a` is the errno).
enum WrapperStage : int32_t {
  kWrapperStageExec = 0,        // execve of the program
  kWrapperStageNoUser = 1,      // --run-as: the wrapper found no such user
  kWrapperStageSwitchUser = 2,  // --run-as: initgroups, setgid or setuid failed, or did not stick
  kWrapperStageUserChdir = 3,   // --run-as: the working directory is not reachable by the user
};

// The wrapper's command line for `program` (argv[0] "hvd-wrapper", whatever binary runs it);
// `run_as` non-empty: the worker runs as that user.
std::vector<std::string> WrapperArgv(const std::string& cgroup_procs_file,
                                     const std::vector<std::string>& program,
                                     const std::string& run_as = "");

// The agent's side of --run-as, before anything is spawned: FailedPrecondition when this process
// is not root ("hvd-agent runs as uid N: --run-as needs an agent started as root"), when `user`
// is unknown on this host (naming the user and `host`), or when it is root (uid 0) and
// `allow_root` is false (hvd-agent --allow-run-as-root). Thread-safe.
Status CheckRunAs(const std::string& user, bool allow_root, const std::string& host);

// The message for a kExecFailed report whose stage is not kWrapperStageExec: `err` the errno,
// `user` the
// --run-as user, `working_dir` the rank's ("" = the agent's).
std::string RunAsFailureText(int32_t stage, int err, const std::string& user,
                             const std::string& working_dir);

// How the wrapper finds and execs the worker's program. (The agent execs the wrapper itself by
// path: process_spawn.* depends on this header, never the other way round.)
// The paths execve is tried with, in order, as execvp does: argv0 itself when it contains a '/',
// else "<dir>/argv0" for each PATH entry (an empty entry means the working directory).
std::vector<std::string> ExecCandidates(const std::string& argv0, const std::string& path_var);

// execve() each candidate in turn as execvp does: EACCES from any candidate wins over "not found"
// from the others; any other error ends the search. Returns the errno to report (it returns only
// when every exec failed). Async-signal-safe: callable between fork and exec.
int ExecFirst(const char* const* candidates, char* const* argv, char* const* envp);

// When argv[1] is kWorkerWrapperFlag, runs the wrapper and exits the process; otherwise returns
// at once. Call it first thing in main(), before any thread starts.
void RunWorkerWrapperIfAsked(int argc, char** argv);

}  // namespace hvd::agent
