// Worker records in the agent's --state-dir: their text form, and what a restarted agent kills
// from them (a live recorded group), and what it must leave alone (a pid reused by someone else).
#include "agent/pid_records.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

namespace hvd::agent {
namespace {

class PidRecordsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hvd_pid_records_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (pid_t p : children_) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
    (void)std::system(("rm -rf " + dir_).c_str());
  }
  // A child in a process group of its own, sleeping.
  pid_t Sleeper() {
    const pid_t p = fork();
    if (p == 0) {
      setpgid(0, 0);
      while (true) pause();
    }
    setpgid(p, p);
    children_.push_back(p);
    return p;
  }
  bool Dead(pid_t p) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    int status = 0;
    while (std::chrono::steady_clock::now() < until) {
      if (waitpid(p, &status, WNOHANG) == p) {
        std::erase(children_, p);
        return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
  std::string dir_;
  std::vector<pid_t> children_;
};

TEST_F(PidRecordsTest, TextFormRoundTrips) {
  WorkerRecord r{"ab12", 2, 7, 100, 555, 101, 556, "/sys/fs/cgroup/x y/rank-7"};
  WorkerRecord back;
  ASSERT_TRUE(ParseRecord(FormatRecord(r), &back));
  EXPECT_EQ(back.job, "ab12");
  EXPECT_EQ(back.attempt, 2);
  EXPECT_EQ(back.rank, 7);
  EXPECT_EQ(back.wrapper_pid, 100);
  EXPECT_EQ(back.wrapper_start, 555u);
  EXPECT_EQ(back.worker_pid, 101);
  EXPECT_EQ(back.worker_start, 556u);
  EXPECT_EQ(back.cgroup_dir, "/sys/fs/cgroup/x y/rank-7");
  EXPECT_FALSE(ParseRecord("job x\nrank 1\n", &back));  // truncated
  EXPECT_FALSE(ParseRecord("", &back));
}

TEST_F(PidRecordsTest, StartTimeIsKnownForLiveProcessesOnly) {
  EXPECT_GT(ProcessStartTime(getpid()), 0u);
  EXPECT_EQ(ProcessStartTime(0), 0u);
  const pid_t p = Sleeper();
  EXPECT_GT(ProcessStartTime(p), 0u);
  kill(p, SIGKILL);
  ASSERT_TRUE(Dead(p));
  EXPECT_EQ(ProcessStartTime(p), 0u);
}

TEST_F(PidRecordsTest, KillsARecordedLiveWorkerAndForgetsTheRecord) {
  PidRecords records(dir_ + "/workers");
  ASSERT_TRUE(records.Init().ok());
  const pid_t worker = Sleeper();
  records.Write({"job", 0, 1, 0, 0, worker, ProcessStartTime(worker), ""});
  ASSERT_EQ(records.ReadAll().size(), 1u);
  EXPECT_GE(records.KillRecorded(), 1);
  EXPECT_TRUE(Dead(worker));
  EXPECT_TRUE(records.ReadAll().empty());
}

TEST_F(PidRecordsTest, LeavesAReusedPidAlone) {
  PidRecords records(dir_ + "/workers");
  ASSERT_TRUE(records.Init().ok());
  const pid_t stranger = Sleeper();
  // The recorded process started at another time: this pid now belongs to someone else.
  records.Write({"job", 0, 0, 0, 0, stranger, ProcessStartTime(stranger) + 1, ""});
  records.KillRecorded();
  EXPECT_GT(ProcessStartTime(stranger), 0u) << "a process that merely reuses the pid was killed";
  EXPECT_TRUE(records.ReadAll().empty());
}

TEST_F(PidRecordsTest, DisabledWithoutADirectory) {
  PidRecords records("");
  EXPECT_FALSE(records.enabled());
  EXPECT_TRUE(records.Init().ok());
  records.Write({"job", 0, 0, 0, 0, 1, 1, ""});
  EXPECT_TRUE(records.ReadAll().empty());
  EXPECT_EQ(records.KillRecorded(), 0);
}

}  // namespace
}  // namespace hvd::agent
