#include "cli/cluster_hosts.h"

#include "base/net.h"

namespace hvd::cli {

std::string LocalhostToHostName(control::JobSpec* spec) {
  const std::string self = base::LocalHostName(/*fallback=*/"");
  if (self.empty()) return "";
  std::string renamed;
  for (control::HostRequest& h : spec->hosts) {
    const std::string& name = h.host;
    if (name == "localhost" || name == "::1" || name == "ip6-localhost" ||
        name.rfind("127.", 0) == 0) {
      renamed += (renamed.empty() ? "" : ", ") + name;
      h.host = self;
    }
  }
  if (renamed.empty()) return "";
  return "hvdrun: -H " + renamed + " is this host: submitted as " + self +
         " (the name its agent registers under)";
}

}  // namespace hvd::cli
