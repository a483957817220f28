#include "cli/timeline_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hvd::cli {

Status CheckTimelinePath(const std::string& given_as, const std::string& path,
                         const std::string& working_dir) {
  if (path == "DYNAMIC") return Status::OK();
  // "-x HVD_TIMELINE=" + path, as the user wrote it; "--timeline-filename" + " " + path.
  const bool assignment = !given_as.empty() && given_as.back() == '=';
  if (path.empty()) {
    return InvalidArgument((assignment ? given_as.substr(0, given_as.size() - 1) : given_as) +
                           " is empty");
  }
  const std::string written = given_as + (assignment ? "" : " ") + path;
  const std::string full = path[0] == '/' || working_dir.empty() ? path : working_dir + "/" + path;
  auto fail = [&](const std::string& what, int err) {
    return InvalidArgument(written + ": " + what + std::strerror(err));
  };
  struct stat st;
  if (stat(full.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return fail("", EISDIR);
    if (access(full.c_str(), W_OK) != 0) return fail("", errno);
    return Status::OK();
  }
  if (errno != ENOENT) return fail("", errno);
  const size_t slash = full.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : full.substr(0, slash);
  if (stat(dir.c_str(), &st) != 0) return fail("directory " + dir + ": ", errno);
  if (!S_ISDIR(st.st_mode)) return fail(dir + ": ", ENOTDIR);
  if (access(dir.c_str(), W_OK | X_OK) != 0) return fail("directory " + dir + ": ", errno);
  return Status::OK();
}

}  // namespace hvd::cli
