#include "cli/cluster_hosts.h"

#include <unistd.h>

namespace hvd::cli {

std::string LocalhostToHostName(v1::JobSpec* spec) {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "";
  const std::string self = buf;
  std::string renamed;
  for (v1::HostSlots& h : *spec->mutable_hosts()) {
    const std::string& name = h.host();
    if (name == "localhost" || name == "::1" || name == "ip6-localhost" ||
        name.rfind("127.", 0) == 0) {
      renamed += (renamed.empty() ? "" : ", ") + name;
      h.set_host(self);
    }
  }
  if (renamed.empty()) return "";
  return "hvdrun: -H " + renamed + " is this host: submitted as " + self +
         " (the name its agent registers under)";
}

}  // namespace hvd::cli
