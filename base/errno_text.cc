#include "base/errno_text.h"

#include <cstring>

namespace hvd::base {

std::string ErrnoText(int err) {
  const char* name = strerrorname_np(err);
  std::string s = strerror(err);
  if (name != nullptr) s += std::string(" (") + name + ")";
  return s;
}

}  // namespace hvd::base
