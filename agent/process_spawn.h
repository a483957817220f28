// fork+exec of one worker, done the careful way: argv as argv (no shell), its own process group,
// PR_SET_PDEATHSIG, no inherited signal mask, ignored signals or descriptors, and exec failures
// reported to the parent so "exec ./trian: No such file or directory" is known at once instead of
// as a mysterious exit code 127. The worker runs under the worker wrapper (worker_wrapper.h): the
// agent forks and execs the wrapper, which forks and execs the worker and reports back.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "hvd/status.h"

namespace hvd::agent {

struct SpawnRequest {
  std::vector<std::string> argv;           // argv[0]: a path, or a name looked up in env's PATH
  std::map<std::string, std::string> env;  // on top of the calling process's environment
  std::string working_dir;                 // empty: the caller's
  std::string wrapper;       // REQUIRED: a binary that runs RunWorkerWrapperIfAsked first thing
  std::string cgroup_procs;  // the rank cgroup's cgroup.procs; empty: no cgroup
  // The worker's standard input (the read end of a pipe; the caller keeps and closes its own
  // copy); -1: /dev/null.
  int stdin_fd = -1;
  // --run-as: the user the worker runs as (the wrapper switches to it after the cgroup join);
  // empty: the caller's. The caller checks it first (CheckRunAs, worker_wrapper.h).
  std::string run_as = "";
};

// HVD_JOB_SECRET never reaches a worker's environment (/proc/<pid>/environ, `ps e` and every
// child would show it to anyone of the same user): SpawnProcess takes it out of the environment
// and passes it in a sealed memfd at this descriptor, with HVD_JOB_SECRET_FD naming it (the
// runtime reads it: runtime/rendezvous/store.h, JobSecret).
inline constexpr int kJobSecretFd = 6;

struct SpawnedProcess {
  int pid = -1;         // the wrapper; also its process group id
  int worker_pid = -1;  // the worker; also its process group id
  int stdout_fd = -1;   // read ends, close-on-exec, owned by the caller
  int stderr_fd = -1;
  int status_fd = -1;    // read end of the wrapper's status pipe (its kExited record comes last)
  int lifeline_fd = -1;  // the lifeline's only write end: close it once the wrapper is reaped
  std::string cpus;      // the CPUs the worker is bound to ("0-3"); empty: not bound
  std::string binding_note;  // what the binding wants said once per host (oversubscription)
};

// Spawns the wrapper and returns once the worker has exec'd. Must be called from a thread that
// outlives the wrapper (PR_SET_PDEATHSIG follows the creating thread). Errors: InvalidArgument
// (empty argv or wrapper), FailedPrecondition for chdir/exec failures naming the path and
// strerror, Unavailable when the system is out of processes or descriptors, Internal when the
// wrapper misbehaves. Nothing is left running on error.
// CPU binding (control/cpu_binding.h): HVD_BIND_TO / HVD_CPU_LIST in the worker's environment
// (request.env over the caller's), with HVD_LOCAL_RANK / HVD_LOCAL_SIZE, bind the wrapper and so
// the worker to the planned CPUs before exec; a plan this host cannot meet (a --cpu-list entry
// naming a CPU it does not allow) fails with FailedPrecondition naming the entry.
Status SpawnProcess(const SpawnRequest& request, SpawnedProcess* out);

// `base` ("K=V" entries, e.g. environ) with `overrides` set on top; sorted by name.
std::vector<std::string> MergeEnvironment(const char* const* base,
                                          const std::map<std::string, std::string>& overrides);

}  // namespace hvd::agent
