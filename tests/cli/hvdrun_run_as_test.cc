// hvdrun --run-as USER end to end in local mode (the embedded agent runs as root, as the tests
// do): the ranks run as the user after joining their cgroup, a real job (rendezvous with the job
// secret at descriptor 6, allreduce) works as that user, an unknown user fails naming it and the
// host, a working directory the user cannot enter fails saying so, a malformed name is refused
// before anything starts, and nothing survives any of it. Local mode lets --run-as name root:
// hvdrun's embedded agent runs as the user who ran hvdrun (docs/security.md); the refusal of root
// by a standalone agent is tested in tests/agent/run_as_test.cc.
// Needs root and creates the system user hvdtest-runas when missing (it stays for reruns);
// without root or useradd the tests skip, saying why.
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>

#include "testutil/expect.h"

#include "hvdrun_process.h"

#ifndef HVDRUN_PATH
#error "HVDRUN_PATH must name the built hvdrun (tests/CMakeLists.txt)"
#endif

namespace hvd::clitest {
namespace {

constexpr auto kJobTimeout = std::chrono::seconds(60);
constexpr char kUser[] = "hvdtest-runas";

// "" when kUser exists (created if needed), else why the test cannot run.
std::string EnsureTestUser() {
  if (geteuid() != 0) return "the tests do not run as root: no user switch is possible";
  if (getpwnam(kUser) != nullptr) return "";
  if (access("/usr/sbin/useradd", X_OK) != 0) {
    return "useradd is missing: cannot create " + std::string(kUser);
  }
  const std::string cmd = std::string("/usr/sbin/useradd --system --no-create-home ") + kUser;
  if (std::system(cmd.c_str()) != 0 && getpwnam(kUser) == nullptr) return cmd + " failed";
  return getpwnam(kUser) != nullptr ? "" : cmd + " created no user";
}

class HvdrunRunAs : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = EnsureTestUser();
    if (!why.empty()) GTEST_SKIP() << why;
    // mkdtemp made it 0700: the ranks run in it as the user, who must be able to enter it.
    chmod(dir_.path().c_str(), 0755);
  }
  ProcResult Hvdrun(std::vector<std::string> args) {
    args.insert(args.begin(), HVDRUN_PATH);
    return RunProcess(args, dir_.path(), kJobTimeout, {"HVD_LAUNCHER=", "HVD_TOKEN_FILE="},
                      dir_.path());
  }
  void TearDown() override { EXPECT_EQ(Leftovers(), std::vector<std::string>{}); }

  TempDir dir_;
};

TEST_F(HvdrunRunAs, RanksRunAsTheUserInTheirCgroup) {
  const passwd* pw = getpwnam(kUser);
  ProcResult r = Hvdrun({"-np", "2", "--run-as", kUser, "/bin/sh", "-c",
                         "echo ids $(id -ru) $(id -u) $(id -rg) $(id -g) $USER $HOME; "
                         "echo secret ${HVD_JOB_SECRET:-absent} ${HVD_JOB_SECRET_FD}; "
                         "grep '^0::' /proc/self/cgroup || echo 'no v2 cgroup'"});
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string ids = "ids " + std::to_string(pw->pw_uid) + " " + std::to_string(pw->pw_uid) +
                          " " + std::to_string(pw->pw_gid) + " " + std::to_string(pw->pw_gid) +
                          " " + kUser + " " + pw->pw_dir;
  for (const char* rank : {"[0]", "[1]"}) {
    EXPECT_HAS(r.out, std::string(rank) + "<stdout>:" + ids);
    EXPECT_HAS(r.out, std::string(rank) + "<stdout>:secret absent 6");
  }
  // Where the agent has cgroups, the user's process is in its rank's: the join came first.
  if (r.out.find("no v2 cgroup") == std::string::npos &&
      r.out.find("hvd-agent") != std::string::npos) {
    EXPECT_HAS(r.out, "/rank-0\n");
    EXPECT_HAS(r.out, "/rank-1\n");
  }
}

TEST_F(HvdrunRunAs, JobTrainsAsTheUser) {
#ifndef EXAMPLE_TRAIN_PATH
  GTEST_SKIP() << "examples/train is not part of this build";
#else
  // The rendezvous needs the job secret: the switched user reads it from the inherited memfd.
  ProcResult r = Hvdrun({"-np", "2", "--run-as", kUser, "--start-timeout", "30", EXAMPLE_TRAIN_PATH,
                         "--steps", "50"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:trained on 2 ranks");
#endif
}

TEST_F(HvdrunRunAs, UnknownUserFailsNamingItAndTheHost) {
  ProcResult r = Hvdrun({"-np", "2", "--run-as", "hvdtest-no-such-user", "/bin/true"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_HAS(r.err,
             "failed to start: --run-as hvdtest-no-such-user: no user "
             "'hvdtest-no-such-user' on host ");
}

TEST_F(HvdrunRunAs, WorkingDirectoryTheUserCannotEnterFails) {
  const std::string priv = dir_ / "private";
  ASSERT_EQ(mkdir(priv.c_str(), 0700), 0);
  ProcResult r = Hvdrun({"-np", "1", "--run-as", kUser, "--working-dir", priv, "/bin/true"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_HAS(r.err, "the working directory " + priv + " is not reachable by user " + kUser +
                        ": Permission denied");
}

TEST_F(HvdrunRunAs, MalformedNameIsAUsageError) {
  for (const char* bad : {"a b", "1000", "a:b", ""}) {
    ProcResult r = Hvdrun({"-np", "1", "--run-as", bad, "/bin/true"});
    ASSERT_FALSE(r.timed_out) << r.err;
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_HAS(r.err, "--run-as '" + std::string(bad) + "': ");
  }
}

// Local mode: the embedded agent runs as hvdrun's user (root here), so --run-as root is allowed.
TEST_F(HvdrunRunAs, LocalModeAllowsRootForARootUser) {
  ProcResult r = Hvdrun({"-np", "1", "--run-as", "root", "/bin/sh", "-c", "echo uid $(id -u)"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:uid 0");
}

}  // namespace
}  // namespace hvd::clitest
