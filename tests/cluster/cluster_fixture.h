// The fixture of the namespace-cluster suites: starts an HvdNetnsCluster (skipping the test with
// the reason when namespaces cannot be made here), and on teardown stops it and checks that
// nothing it started survives: no daemon or rank process (by pid and by a marker every process
// carries in its environment) and no namespace.
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tests/cluster/hvd_netns.h"
#include "testutil/expect.h"

#if !defined(HVD_LAUNCHERD_PATH) || !defined(HVD_AGENT_PATH) || !defined(HVDRUN_PATH) || \
    !defined(EXAMPLE_TRAIN_PATH)
#error "tests/CMakeLists.txt must define the binaries' paths for tests/cluster"
#endif

namespace hvd::clustertest {

// Every live process whose environment holds `marker` (zombies excluded), as "pid: cmdline".
std::vector<std::string> ProcessesMarked(const std::string& marker);

class NetnsTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Starts the cluster; skips the test when namespaces cannot be made here.
  void StartCluster(HvdClusterOptions options);
  static Binaries Bin() { return {HVD_LAUNCHERD_PATH, HVD_AGENT_PATH, HVDRUN_PATH}; }

  // Polls GET /v1/jobs/{id} until `done` (bounded); returns the last answer.
  nlohmann::json WaitJob(const std::string& id,
                         const std::function<bool(const nlohmann::json&)>& done,
                         std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // The id of the newest job.
  std::string LastJobId();

  clitest::TempDir dir_;
  std::string marker_;
  std::unique_ptr<HvdNetnsCluster> cluster_;
  std::vector<std::string> namespaces_;
};

}  // namespace hvd::clustertest
