// What a previous run of the agent left: see previous_run.h.
#include "agent/previous_run.h"

#include <unistd.h>

#include <memory>
#include <string>

#include "agent/cgroup.h"
#include "agent/pid_records.h"
#include "agent/state_dir.h"
#include "base/logging.h"

namespace hvd::agent {

Status CleanUpPreviousRun(const AgentOptions& options, WorkersOptions* workers) {
  std::string key;
  if (!options.state_dir.empty()) {
    workers->records_dir = options.state_dir + "/workers";
    PidRecords records(workers->records_dir);
    HVD_RETURN_IF_ERROR(records.Init());
    const int n = records.KillRecorded();
    if (n > 0) {
      HVD_LOG(WARNING) << "killed " << n << " process(es) left by a previous run";
    }
    HVD_RETURN_IF_ERROR(LoadOrCreateCgroupKey(options.state_dir, &key));
  } else {
    key = "pid" + std::to_string(getpid());
  }
  if (!options.use_cgroups) return Status::OK();
  std::unique_ptr<CgroupTree> tree;
  Status s = CgroupTree::Open(key, &tree);
  if (!s.ok()) {
    HVD_LOG(WARNING) << "jobs run without cgroups: " << s.message()
                     << ". A worker's descendant that leaves its process group is still killed "
                        "by the worker wrapper, unless the wrapper itself is killed.";
    return Status::OK();
  }
  tree->RemoveDeadAgents();
  for (const std::string& dir : tree->JobDirs()) {
    HVD_LOG(WARNING) << "killing what is left in " << dir << " from a previous run";
    Status ks = tree->KillAndRemove(dir);
    if (!ks.ok()) {
      HVD_LOG(ERROR) << ks.message();
    }
  }
  HVD_LOG(INFO) << "jobs run in " << CgroupKindName(tree->kind()) << " cgroups under "
                << tree->base();
  workers->cgroups = std::move(tree);
  return Status::OK();
}

}  // namespace hvd::agent
