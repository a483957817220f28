// fork+exec of one worker, done the careful way: argv as argv (no shell), its own process group,
// PR_SET_PDEATHSIG, no inherited signal mask, ignored signals or descriptors, and exec failures
// reported to the parent through a close-on-exec pipe so "exec ./trian: No such file or
// directory" is known at once instead of as a mysterious exit code 127.
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
};

struct SpawnedProcess {
  int pid = -1;        // also its process group id
  int stdout_fd = -1;  // read ends, close-on-exec, owned by the caller
  int stderr_fd = -1;
};

// Spawns the process and returns once it has exec'd. Must be called from a thread that outlives
// the child (PR_SET_PDEATHSIG follows the creating thread). Errors: InvalidArgument (empty argv),
// FailedPrecondition for chdir/exec failures naming the path and strerror, Unavailable when the
// system is out of processes or descriptors. Nothing is left running on error.
Status SpawnProcess(const SpawnRequest& request, SpawnedProcess* out);

// `base` ("K=V" entries, e.g. environ) with `overrides` set on top; sorted by name.
std::vector<std::string> MergeEnvironment(const char* const* base,
                                          const std::map<std::string, std::string>& overrides);

// The paths execve is tried with, in order, as execvp does: argv0 itself when it contains a '/',
// else "<dir>/argv0" for each PATH entry (an empty entry means the working directory).
std::vector<std::string> ExecCandidates(const std::string& argv0, const std::string& path_var);

}  // namespace hvd::agent
