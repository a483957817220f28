#include "tests/cluster/cluster_fixture.h"

#include <dirent.h>
#include <sys/stat.h>

#include <random>

namespace hvd::clustertest {

std::vector<std::string> ProcessesMarked(const std::string& marker) {
  std::vector<std::string> found;
  DIR* d = opendir("/proc");
  if (d == nullptr) return found;
  const std::string self = std::to_string(getpid());
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || e->d_name == self) continue;
    const std::string pid = e->d_name;
    if (clitest::ReadAll("/proc/" + pid + "/environ").find(marker) == std::string::npos) continue;
    if (!clitest::ProcessAlive(std::atoi(pid.c_str()))) continue;
    std::string cmd = clitest::ReadAll("/proc/" + pid + "/cmdline");
    for (char& c : cmd) c = c == '\0' ? ' ' : c;
    found.push_back(pid + ": " + cmd);
  }
  closedir(d);
  return found;
}

void NetnsTest::SetUp() {
  std::random_device rd;
  marker_ = "hvd-netns-test-" + std::to_string(getpid()) + "-" + std::to_string(rd());
}

void NetnsTest::StartCluster(HvdClusterOptions options) {
  options.env.push_back("HVD_NETNS_MARKER=" + marker_);
  options.env.push_back("HVD_LAUNCHER=");
  options.env.push_back("HVD_TOKEN_FILE=");
  Status s = HvdNetnsCluster::Start(Bin(), options, dir_.path(), &cluster_);
  if (s.code() == StatusCode::kFailedPrecondition) GTEST_SKIP() << s.message();
  ASSERT_TRUE(s.ok()) << s.message();
  namespaces_ = cluster_->net().namespaces();
}

void NetnsTest::TearDown() {
  if (cluster_) {
    Status s = cluster_->Stop();
    EXPECT_TRUE(s.ok()) << s.message();
    const std::vector<pid_t> live = cluster_->LivePids();
    EXPECT_TRUE(live.empty()) << "processes of this test still alive: "
                              << ::testing::PrintToString(live);
    cluster_.reset();  // kills what is left, deletes the namespaces
  }
  EXPECT_EQ(clitest::Leftovers(), std::vector<std::string>{});
  std::vector<std::string> marked;
  WaitUntil([&] { return (marked = ProcessesMarked(marker_)).empty(); }, std::chrono::seconds(3));
  EXPECT_EQ(marked, std::vector<std::string>{}) << "processes of this test survived it";
  for (const std::string& p : marked) kill(std::atoi(p.c_str()), SIGKILL);
  for (const std::string& ns : namespaces_) {
    struct stat st;
    EXPECT_NE(stat(("/var/run/netns/" + ns).c_str(), &st), 0) << "namespace " << ns << " left";
  }
}

nlohmann::json NetnsTest::WaitJob(const std::string& id,
                                  const std::function<bool(const nlohmann::json&)>& done,
                                  std::chrono::milliseconds timeout) {
  nlohmann::json j;
  const bool ok =
      WaitUntil([&] { return cluster_->GetJson("/v1/jobs/" + id, &j).ok() && done(j); }, timeout);
  EXPECT_TRUE(ok) << "job " << id << " never reached the expected state: " << j.dump(2);
  return j;
}

std::string NetnsTest::LastJobId() {
  nlohmann::json jobs;
  Status s = cluster_->GetJson("/v1/jobs", &jobs);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok() || jobs["jobs"].empty()) return "";
  return jobs["jobs"].back()["id"].get<std::string>();
}

}  // namespace hvd::clustertest
