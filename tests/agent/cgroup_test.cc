// Job cgroups: parsing /proc/self/mountinfo and /proc/self/cgroup, and, where this machine lets
// the test create cgroups (root with a writable hierarchy, as CI has), a real tree: a rank's
// process that started a session of its own is still killed with the rank's cgroup, and nothing is
// left of the tree afterwards.
#include "agent/cgroup.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "control/token.h"

namespace hvd::agent {
namespace {

const char kMountinfo[] =
    "24 30 0:22 / /sys rw,nosuid - sysfs sysfs rw\n"
    "35 24 0:30 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755\n"
    "36 35 0:31 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate\n"
    "40 35 0:35 / /sys/fs/cgroup/freezer rw,nosuid shared:14 - cgroup cgroup rw,freezer\n"
    "41 35 0:36 / /sys/fs/cgroup/cpu,cpuacct rw shared:15 - cgroup cgroup rw,cpu,cpuacct\n"
    "42 35 0:37 / /sys/fs/cgroup/pids rw,nosuid shared:16 - cgroup cgroup rw,pids\n";

const char kSelfCgroup[] =
    "12:pids:/system.slice/hvd-agent.service\n"
    "7:freezer:/\n"
    "3:cpu,cpuacct:/system.slice\n"
    "0::/system.slice/hvd-agent.service\n";

TEST(CgroupParse, FindsEachHierarchysMountPoint) {
  EXPECT_EQ(CgroupMountPoint(kMountinfo, CgroupKind::kV2), "/sys/fs/cgroup/unified");
  EXPECT_EQ(CgroupMountPoint(kMountinfo, CgroupKind::kV1Freezer), "/sys/fs/cgroup/freezer");
  EXPECT_EQ(CgroupMountPoint(kMountinfo, CgroupKind::kV1Pids), "/sys/fs/cgroup/pids");
  EXPECT_EQ(CgroupMountPoint("", CgroupKind::kV2), "");
  // A pure v2 machine: no v1 hierarchy at all.
  const std::string v2only = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";
  EXPECT_EQ(CgroupMountPoint(v2only, CgroupKind::kV2), "/sys/fs/cgroup");
  EXPECT_EQ(CgroupMountPoint(v2only, CgroupKind::kV1Freezer), "");
  // Malformed lines are skipped, not misread.
  EXPECT_EQ(CgroupMountPoint("garbage\n1 2 - cgroup2\n", CgroupKind::kV2), "");
}

TEST(CgroupParse, FindsThisProcesssPathInEachHierarchy) {
  EXPECT_EQ(OwnCgroupPath(kSelfCgroup, CgroupKind::kV2), "/system.slice/hvd-agent.service");
  EXPECT_EQ(OwnCgroupPath(kSelfCgroup, CgroupKind::kV1Freezer), "/");
  EXPECT_EQ(OwnCgroupPath(kSelfCgroup, CgroupKind::kV1Pids), "/system.slice/hvd-agent.service");
  EXPECT_EQ(OwnCgroupPath("0::/a:b\n", CgroupKind::kV2), "/a:b");  // ':' inside the path
  EXPECT_EQ(OwnCgroupPath("3:cpu:/x\n", CgroupKind::kV1Freezer), "");
}

TEST(CgroupTree, RefusesAKeyThatIsNotOneDirectoryName) {
  std::unique_ptr<CgroupTree> tree;
  EXPECT_EQ(CgroupTree::OpenAt(CgroupKind::kV2, "/tmp", "a/b", &tree).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CgroupTree::OpenAt(CgroupKind::kV2, "/tmp", "", &tree).code(),
            StatusCode::kInvalidArgument);
  // A plain directory is no cgroup.
  Status s = CgroupTree::OpenAt(CgroupKind::kV2, "/tmp", "k", &tree);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("/tmp is not a cgroup directory"), std::string::npos) << s.message();
}

bool Alive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!std::getline(stat, s)) return false;
  const size_t p = s.rfind(')');
  return p != std::string::npos && p + 2 < s.size() && s[p + 2] != 'Z';
}

class RealCgroup : public ::testing::Test {
 protected:
  void SetUp() override {
    Status s = CgroupTree::Open("test." + control::RandomHex(4), &tree_);
    if (!s.ok()) GTEST_SKIP() << "no writable cgroup hierarchy here: " << s.message();
  }
  void TearDown() override {
    if (tree_) {
      tree_->RemoveAll();
      struct stat st;
      EXPECT_NE(stat(tree_->base().c_str(), &st), 0) << tree_->base() << " was left behind";
    }
  }
  std::unique_ptr<CgroupTree> tree_;
};

TEST_F(RealCgroup, KillsAProcessThatLeftItsSessionAndRemovesTheDirectories) {
  std::string dir;
  ASSERT_TRUE(tree_->CreateRankDir("job1", 0, 3, &dir).ok());
  EXPECT_EQ(dir, tree_->base() + "/job-job1.0/rank-3");
  int pids[2];
  ASSERT_EQ(pipe(pids), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Joins the rank's cgroup, then leaves a grandchild in a session of its own and exits.
    std::ofstream(CgroupTree::ProcsFile(dir)) << "0";
    const pid_t grand = fork();
    if (grand == 0) {
      setsid();
      while (true) pause();
    }
    if (write(pids[1], &grand, sizeof grand) != sizeof grand) _exit(1);
    _exit(0);
  }
  close(pids[1]);
  pid_t grand = 0;
  ASSERT_EQ(read(pids[0], &grand, sizeof grand), static_cast<ssize_t>(sizeof grand));
  close(pids[0]);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  ASSERT_TRUE(Alive(grand));
  ASSERT_EQ(tree_->JobDirs(), std::vector<std::string>{tree_->base() + "/job-job1.0"});

  Status s = tree_->KillAndRemove(tree_->base() + "/job-job1.0");
  EXPECT_TRUE(s.ok()) << s.ToString();
  // The grandchild was re-parented to init (or a subreaper): it is no zombie of ours to reap.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (Alive(grand) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(Alive(grand)) << "pid " << grand << " survived its cgroup's kill";
  EXPECT_TRUE(tree_->JobDirs().empty());
  // Removing what is already gone is fine.
  EXPECT_TRUE(tree_->KillAndRemove(tree_->base() + "/job-job1.0").ok());
}

TEST_F(RealCgroup, ARankDirThatNeverHeldAProcessIsRemovedWithItsEmptyJobDir) {
  std::string a, b;
  ASSERT_TRUE(tree_->CreateRankDir("j", 1, 0, &a).ok());
  ASSERT_TRUE(tree_->CreateRankDir("j", 1, 1, &b).ok());
  tree_->RemoveRankDir(a);
  EXPECT_EQ(tree_->JobDirs().size(), 1u);  // rank 1 still there
  tree_->RemoveRankDir(b);
  EXPECT_TRUE(tree_->JobDirs().empty());
}

// An agent without --state-dir killed outright leaves "hvd-agent.pid<N>"; the next agent removes
// it when process N is gone and nothing runs there, and leaves a live agent's alone.
TEST_F(RealCgroup, ADeadAgentsEmptyDirectoryIsRemovedALiveOnesIsKept) {
  const std::string parent = tree_->base().substr(0, tree_->base().rfind('/'));
  const pid_t gone = fork();
  ASSERT_GE(gone, 0);
  if (gone == 0) _exit(0);
  ASSERT_EQ(waitpid(gone, nullptr, 0), gone);
  std::unique_ptr<CgroupTree> dead, live;
  ASSERT_TRUE(CgroupTree::OpenAt(tree_->kind(), parent, "pid" + std::to_string(gone), &dead).ok());
  std::string rank_dir;
  ASSERT_TRUE(dead->CreateRankDir("j", 0, 1, &rank_dir).ok());
  ASSERT_TRUE(
      CgroupTree::OpenAt(tree_->kind(), parent, "pid" + std::to_string(getpid()), &live).ok());

  // At least this one: empty leftovers of other dead agents beside it (this host's) go too.
  EXPECT_GE(tree_->RemoveDeadAgents(), 1);
  struct stat st;
  EXPECT_NE(stat(dead->base().c_str(), &st), 0) << dead->base() << " was left behind";
  EXPECT_EQ(stat(live->base().c_str(), &st), 0) << live->base() << " of a live pid was removed";
  live->RemoveAll();
}

}  // namespace
}  // namespace hvd::agent
