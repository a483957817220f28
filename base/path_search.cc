#include "base/path_search.h"

namespace hvd::base {

std::vector<std::string> PathCandidates(std::string_view name, std::string_view path_var,
                                        std::string_view cwd) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t colon = path_var.find(':', start);
    std::string dir(
        path_var.substr(start, colon == std::string_view::npos ? colon : colon - start));
    if (dir.empty()) dir = cwd.empty() ? std::string(".") : std::string(cwd);
    if (dir.back() != '/') dir += '/';
    out.push_back(dir + std::string(name));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  return out;
}

}  // namespace hvd::base
