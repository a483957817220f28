// MASTER_PORT's messages as the launcher's logic sees them (hvd.v1.MasterPortRequest and
// MasterPortReport): before a job's ranks start, the launcher asks the agent of rank 0 for a free
// port on its host, which every rank then gets as torchrun's MASTER_PORT (job_master_port.cc;
// the agent's side: agent/master_port.h).
#pragma once

#include <string>

namespace hvd::launcherd {

struct MasterPortCommand {
  std::string request_id;
  std::string job_id;
};

struct MasterPortAnswer {
  std::string request_id;
  int port = 0;
  std::string error;
};

}  // namespace hvd::launcherd
