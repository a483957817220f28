// hvdrun's program path: argv[0] resolved as a shell would, with a shell's words when it cannot
// be run.
#include "cli/program_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/path_search.h"

namespace hvd::cli {
namespace {

// What a shell says about a path it cannot run.
Status CheckExecutable(const std::string& shown, const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    return (err == ENOENT || err == ENOTDIR
                ? NotFound(shown + ": " + std::strerror(err))
                : FailedPrecondition(shown + ": " + std::strerror(err)));
  }
  if (S_ISDIR(st.st_mode)) return FailedPrecondition(shown + ": " + std::strerror(EISDIR));
  if (!S_ISREG(st.st_mode) || access(path.c_str(), X_OK) != 0) {
    return FailedPrecondition(shown + ": " + std::strerror(EACCES) + " (chmod +x " + path + "?)");
  }
  return Status::OK();
}

}  // namespace

std::string JoinPath(const std::string& dir, const std::string& rel) {
  std::string r = rel;
  while (r.rfind("./", 0) == 0) r.erase(0, 2);  // "./train" -> "train": tidier paths in logs
  if (dir.empty() || dir.back() == '/') return dir + r;
  return dir + "/" + r;
}

Status ResolveProgram(const std::string& program, const std::string& working_dir,
                      const std::string& path_var, bool check, std::string* resolved) {
  if (program.empty()) return InvalidArgument("the program name is empty");
  if (program.find('/') != std::string::npos) {
    *resolved = program[0] == '/' ? program : JoinPath(working_dir, program);
    return check ? CheckExecutable(program, *resolved) : Status::OK();
  }
  if (!check) {
    *resolved = program;  // the agent's exec searches its own PATH
    return Status::OK();
  }
  // As a shell: the first executable match wins; an empty PATH entry is the working directory.
  std::string first_denied;
  for (std::string candidate : base::PathCandidates(program, path_var, working_dir)) {
    if (candidate[0] != '/') candidate = JoinPath(working_dir, candidate);  // a relative PATH entry
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (access(candidate.c_str(), X_OK) == 0) {
        *resolved = candidate;
        return Status::OK();
      }
      if (first_denied.empty()) first_denied = candidate;
    }
  }
  if (!first_denied.empty()) return CheckExecutable(program, first_denied);
  return NotFound(program + ": command not found (not in PATH; give a path such as ./" + program +
                  ")");
}

}  // namespace hvd::cli
