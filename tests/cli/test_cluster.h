// The embedded launcher and agent that hvdrun's cluster-mode tests submit to (`--launcher`), and
// the token file hvdrun reads for it.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "cli/embedded.h"
#include "hvd/status.h"
#include "hvdrun_process.h"

namespace hvd::clitest {

// Starts a cluster whose agent has `slots` slots and runs workers through `wrapper_path` (a
// built hvd-agent), and writes its token to `token_path` (mode 0600).
inline Status StartTestCluster(int slots, const std::string& wrapper_path,
                               const std::string& token_path,
                               std::unique_ptr<cli::EmbeddedCluster>* cluster) {
  if (!cli::HaveEmbeddedCluster()) {
    return FailedPrecondition("this build has no embedded launcher and agent");
  }
  cli::EmbeddedOptions o;
  o.slots = slots;
  o.kill_grace = std::chrono::milliseconds(2000);
  o.wrapper_path = wrapper_path;
  HVD_RETURN_IF_ERROR(cli::EmbeddedCluster::Start(o, cluster));
  WriteFile(token_path, (*cluster)->token() + "\n", 0600);
  return Status::OK();
}

}  // namespace hvd::clitest
