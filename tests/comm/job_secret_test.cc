// How a rank finds its job secret (runtime/rendezvous/store.h, JobSecret): HVD_JOB_SECRET_FD
// (hvd-agent's way), then HVD_JOB_SECRET_FILE (0600 or stricter); HVD_JOB_SECRET stays for
// manual runs (read by the hvd:// store itself).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "rendezvous/store.h"

namespace hvd::runtime::rendezvous {
namespace {

class JobSecretTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    unsetenv("HVD_JOB_SECRET_FD");
    unsetenv("HVD_JOB_SECRET_FILE");
  }
};

TEST_F(JobSecretTest, NoneSetGivesEmpty) {
  std::string s = "x";
  ASSERT_TRUE(JobSecret(&s).ok());
  EXPECT_EQ(s, "");
}

// -5 was read as "none", and the rendezvous then said HVD_JOB_SECRET was not set.
TEST_F(JobSecretTest, ANegativeDescriptorIsRefused) {
  setenv("HVD_JOB_SECRET_FD", "-5", 1);
  std::string secret;
  Status s = JobSecret(&secret);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("HVD_JOB_SECRET_FD=-5 is not a descriptor"), std::string::npos)
      << s.message();
}

TEST_F(JobSecretTest, DescriptorIsReadFromTheStartEveryTime) {
  const int fd = memfd_create("secret", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "abc123\n", 7), 7);  // the offset is now at the end: pread ignores it
  setenv("HVD_JOB_SECRET_FD", std::to_string(fd).c_str(), 1);
  for (int i = 0; i < 2; ++i) {  // a second Init() reads it again
    std::string s;
    Status st = JobSecret(&s);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(s, "abc123");
  }
  close(fd);
  std::string s;
  Status st = JobSecret(&s);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("HVD_JOB_SECRET_FD="), std::string::npos) << st.message();
  // The likely cause named: a spawned Python worker re-running a script's hvd.init().
  EXPECT_NE(st.message().find("if __name__ == \"__main__\":"), std::string::npos) << st.message();
}

TEST_F(JobSecretTest, FileMustBePrivate) {
  char path[] = "/tmp/hvd-secret-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "filesecret", 10), 10);
  close(fd);
  setenv("HVD_JOB_SECRET_FILE", path, 1);
  ASSERT_EQ(chmod(path, 0644), 0);
  std::string s;
  Status st = JobSecret(&s);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("chmod 600"), std::string::npos) << st.message();
  ASSERT_EQ(chmod(path, 0600), 0);
  st = JobSecret(&s);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(s, "filesecret");
  unlink(path);
}

}  // namespace
}  // namespace hvd::runtime::rendezvous
