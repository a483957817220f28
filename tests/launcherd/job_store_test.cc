// jobs.db holds job secrets and -x values: it and its -wal and -shm are 0600 whatever the umask
// and the directory's mode, files left looser are tightened, and an open state dir is warned of.
#include "launcherd/job_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include "testutil/expect.h"

namespace hvd::launcherd {
namespace {

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

class JobStoreFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hvd_job_store_files_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    old_umask_ = umask(0);  // the worst case: nothing masked
  }
  void TearDown() override {
    umask(old_umask_);
    (void)std::system(("rm -rf " + dir_).c_str());
  }
  Status PutOne(JobStore* store) {
    StoredJob job;
    job.status.id = "job-1";
    job.status.submit_time_ms = 1;
    job.secret = "secret-of-job-1";
    return store->Put(job);
  }
  std::string dir_;
  mode_t old_umask_ = 022;
};

TEST_F(JobStoreFiles, DatabaseWalAndShmArePrivateWhateverTheUmask) {
  ASSERT_EQ(chmod(dir_.c_str(), 0777), 0);  // a directory anyone may read and write
  ::testing::internal::CaptureStderr();
  std::unique_ptr<JobStore> store;
  Status s = JobStore::Open(dir_, &store);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(PutOne(store.get()).ok());
  // While the store is open, WAL mode keeps all three files.
  for (const char* name : {"/jobs.db", "/jobs.db-wal", "/jobs.db-shm"}) {
    EXPECT_EQ(ModeOf(dir_ + name), 0600u) << name;
  }
  EXPECT_HAS(err, "--state-dir " + dir_ + " is open to other users (mode 0777)");
  EXPECT_HAS(err, "chmod 700 " + dir_);
}

TEST_F(JobStoreFiles, FilesLeftLooserAreTightened) {
  {
    std::unique_ptr<JobStore> store;
    ASSERT_TRUE(JobStore::Open(dir_, &store).ok());
    ASSERT_TRUE(PutOne(store.get()).ok());
    // What an older launcher left: world-readable files (the WAL is open, so it exists).
    for (const char* name : {"/jobs.db", "/jobs.db-wal", "/jobs.db-shm"}) {
      ASSERT_EQ(chmod((dir_ + name).c_str(), 0644), 0) << name;
    }
    std::unique_ptr<JobStore> again;
    ASSERT_TRUE(JobStore::Open(dir_, &again).ok());
    for (const char* name : {"/jobs.db", "/jobs.db-wal", "/jobs.db-shm"}) {
      EXPECT_EQ(ModeOf(dir_ + name), 0600u) << name;
    }
    std::vector<StoredJob> jobs;
    ASSERT_TRUE(again->LoadAll(&jobs).ok());
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].secret, "secret-of-job-1");
  }
  EXPECT_EQ(ModeOf(dir_ + "/jobs.db"), 0600u);
}

TEST_F(JobStoreFiles, APrivateStateDirIsNotWarnedOf) {
  ASSERT_EQ(chmod(dir_.c_str(), 0700), 0);
  ::testing::internal::CaptureStderr();
  std::unique_ptr<JobStore> store;
  Status s = JobStore::Open(dir_, &store);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(err.find("open to other users"), std::string::npos) << err;
}

TEST_F(JobStoreFiles, ASymlinkInPlaceOfTheDatabaseIsRefused) {
  const std::string target = dir_ + "/elsewhere";
  ASSERT_EQ(symlink(target.c_str(), (dir_ + "/jobs.db").c_str()), 0);
  std::unique_ptr<JobStore> store;
  Status s = JobStore::Open(dir_, &store);
  EXPECT_FALSE(s.ok());
  EXPECT_HAS(s.message(), dir_ + "/jobs.db");
  struct stat st;
  EXPECT_NE(stat(target.c_str(), &st), 0) << "the symlink was followed";
}

}  // namespace
}  // namespace hvd::launcherd
