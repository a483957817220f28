// How hvdrun shows jobs: tagged output lines and per-rank files (output.h), and the failure
// summary, exit codes and tables (job_format.h).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include "testutil/expect.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "cli/job_format.h"
#include "cli/output.h"

namespace hvd::cli {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ReadAll(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  return out;
}

v1::OutputLine Line(int rank, bool is_stderr, const std::string& text, int64_t seq = 0) {
  v1::OutputLine l;
  l.set_rank(rank);
  l.set_stderr(is_stderr);
  l.set_text(text);
  l.set_seq(seq);
  return l;
}

class Output : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/output_test.XXXXXX";
    dir_ = mkdtemp(tmpl);
    out_ = std::tmpfile();
    err_ = std::tmpfile();
  }
  void TearDown() override {
    std::fclose(out_);
    std::fclose(err_);
    (void)!std::system(("rm -rf " + dir_).c_str());
  }
  std::string dir_;
  FILE* out_ = nullptr;
  FILE* err_ = nullptr;
};

TEST(TagLine, HorovodrunFormat) {
  EXPECT_EQ(TagLine(1, false, "text"), "[1]<stdout>:text");
  EXPECT_EQ(TagLine(12, true, "oops"), "[12]<stderr>:oops");
  EXPECT_EQ(TagLine(0, false, ""), "[0]<stdout>:");
}

TEST_F(Output, TerminalOnly) {
  std::unique_ptr<OutputSink> sink;
  ASSERT_TRUE(OutputSink::Create("", out_, err_, &sink).ok());
  sink->Write(Line(0, false, "loss 0.5"));
  sink->Write(Line(1, true, "warning: slow"));
  sink->Write(Line(1, false, "loss 0.4"));
  sink->Message("hvdrun: job x is waiting: needs 4 slots, 2 free");
  EXPECT_EQ(ReadAll(out_), "[0]<stdout>:loss 0.5\n[1]<stdout>:loss 0.4\n");
  EXPECT_EQ(ReadAll(err_),
            "[1]<stderr>:warning: slow\nhvdrun: job x is waiting: needs 4 slots, 2 free\n");
}

TEST_F(Output, PerRankFiles) {
  const std::string logs = dir_ + "/a/b/logs";  // parents are created
  std::unique_ptr<OutputSink> sink;
  ASSERT_TRUE(OutputSink::Create(logs, out_, err_, &sink).ok());
  struct stat st;
  EXPECT_EQ(stat(logs.c_str(), &st), 0);  // created up front, before any output
  sink->Write(Line(0, false, "a"));
  sink->Write(Line(3, true, "b"));
  sink->Write(Line(0, false, "c"));
  sink->Write(Line(0, true, ""));
  EXPECT_EQ(ReadAll(logs + "/rank.0/stdout"), "a\nc\n");
  EXPECT_EQ(ReadAll(logs + "/rank.0/stderr"), "\n");
  EXPECT_EQ(ReadAll(logs + "/rank.3/stderr"), "b\n");
  EXPECT_NE(stat((logs + "/rank.3/stdout").c_str(), &st), 0);  // no output, no file
  EXPECT_EQ(ReadAll(out_), "[0]<stdout>:a\n[0]<stdout>:c\n");
}

TEST_F(Output, ExistingDirectoryIsFineAndFilesAreTruncated) {
  std::unique_ptr<OutputSink> sink;
  ASSERT_TRUE(OutputSink::Create(dir_, out_, err_, &sink).ok());
  mkdir((dir_ + "/rank.0").c_str(), 0755);
  std::ofstream(dir_ + "/rank.0/stdout") << "old run\n";
  sink->Write(Line(0, false, "new run"));
  EXPECT_EQ(ReadAll(dir_ + "/rank.0/stdout"), "new run\n");
}

TEST_F(Output, BadDirectoryFailsUpFront) {
  std::ofstream(dir_ + "/file") << "x";
  std::unique_ptr<OutputSink> sink;
  Status s = OutputSink::Create(dir_ + "/file", out_, err_, &sink);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(s.message(), "--output-filename: " + dir_ + "/file exists and is not a directory");
  s = OutputSink::Create(dir_ + "/file/sub", out_, err_, &sink);
  EXPECT_HAS(s.message(), "cannot create directory " + dir_ + "/file/sub: Not a directory");
}

TEST_F(Output, UnwritableRankFileIsReportedOnceAndTheLineStillShown) {
  std::unique_ptr<OutputSink> sink;
  ASSERT_TRUE(OutputSink::Create(dir_, out_, err_, &sink).ok());
  std::ofstream(dir_ + "/rank.2") << "a file where the rank's directory should be";
  sink->Write(Line(2, false, "one"));
  sink->Write(Line(2, false, "two"));
  const std::string err = ReadAll(err_);
  EXPECT_HAS(err, "rank 2's output is shown here but not saved");
  EXPECT_EQ(err.find("not saved"), err.rfind("not saved")) << "reported twice: " << err;
  EXPECT_EQ(ReadAll(out_), "[2]<stdout>:one\n[2]<stdout>:two\n");
}

v1::JobStatus Job(v1::JobState state, int exit_code) {
  v1::JobStatus st;
  st.set_id("j1");
  st.set_state(state);
  st.set_exit_code(exit_code);
  return st;
}

TEST(JobExitCode, FollowsTheJob) {
  EXPECT_EQ(JobExitCode(Job(v1::SUCCEEDED, 0)), 0);
  EXPECT_EQ(JobExitCode(Job(v1::FAILED, 3)), 3);
  EXPECT_EQ(JobExitCode(Job(v1::FAILED, 137)), 137);
  EXPECT_EQ(JobExitCode(Job(v1::FAILED, 0)), 1);  // never 0 for a failed job
  EXPECT_EQ(JobExitCode(Job(v1::CANCELLED, 0)), 130);
  EXPECT_EQ(JobExitCode(Job(v1::CANCELLED, 143)), 143);
}

TEST(FailureSummary, NamesRankHostCodeAndStderr) {
  v1::JobStatus st = Job(v1::FAILED, 3);
  v1::JobFailure* f = st.mutable_failure();
  f->set_rank(1);
  f->set_host("node-b");
  f->set_exit_code(3);
  f->set_stderr_tail("Traceback:\nValueError: bad shape");
  EXPECT_EQ(FailureSummary(st),
            "hvdrun: job j1 failed: rank 1 on node-b exited with code 3\n"
            "hvdrun: last stderr lines of rank 1:\n"
            "hvdrun:   Traceback:\n"
            "hvdrun:   ValueError: bad shape\n");
  f->set_message("rank 1 on node-b exited with code 3 (custom)");
  EXPECT_HAS(FailureSummary(st), "failed: rank 1 on node-b exited with code 3 (custom)\n");
}

TEST(FailureSummary, Signal) {
  v1::JobStatus st = Job(v1::FAILED, 139);
  st.mutable_failure()->set_rank(0);
  st.mutable_failure()->set_host("a");
  st.mutable_failure()->set_signal(11);
  EXPECT_HAS(FailureSummary(st), "rank 0 on a");
  EXPECT_HAS(FailureSummary(st), "SIGSEGV");
}

TEST(FailureSummary, WithoutARankToBlame) {
  v1::JobStatus st = Job(v1::FAILED, 1);
  st.set_reason("needs 8 slots but the hosts offer 4");
  EXPECT_EQ(FailureSummary(st), "hvdrun: job j1 failed: needs 8 slots but the hosts offer 4\n");
  st = Job(v1::CANCELLED, 130);
  st.set_reason("hvdrun received SIGINT");
  EXPECT_EQ(FailureSummary(st), "hvdrun: job j1 was cancelled: hvdrun received SIGINT\n");
  EXPECT_EQ(FailureSummary(Job(v1::SUCCEEDED, 0)), "");
}

TEST(FormatDuration, Units) {
  EXPECT_EQ(FormatDuration(0), "0.0 s");
  EXPECT_EQ(FormatDuration(3250), "3.2 s");  // control::SecondsText, as the launcher writes
  EXPECT_EQ(FormatDuration(245000), "4m05s");
  EXPECT_EQ(FormatDuration(7380000), "2h03m");
  EXPECT_EQ(FormatDuration(-5), "-");
}

TEST(Tables, JobsAndAgents) {
  v1::JobStatus st = Job(v1::RUNNING, 0);
  st.mutable_spec()->set_np(4);
  st.mutable_spec()->set_name("resnet");
  st.set_submit_time_ms(1000);
  st.set_start_time_ms(2000);
  const std::string jobs = JobTable({st}, 62000);
  EXPECT_HAS(jobs, "ID  NAME    STATE    NP  SUBMITTED  DURATION  EXIT\n");
  EXPECT_HAS(jobs, "j1  resnet  RUNNING  4   1m01s ago  1m00s     -\n");

  v1::AgentInfo a;
  a.set_agent_id("ag1");
  a.set_host("node-a");
  a.set_advertise_addr("10.0.0.1");
  a.set_state("READY");
  a.set_slots(8);
  a.set_slots_in_use(4);
  a.set_last_heartbeat_ms(9500);
  const std::string agents = AgentTable({a}, 10000);
  EXPECT_HAS(agents, "AGENT  HOST");
  EXPECT_HAS(agents, "ag1    node-a  10.0.0.1  READY  4/8");
  EXPECT_HAS(agents, "0.5 s ago");
}

TEST(JobDetail, ShowsRanks) {
  v1::JobStatus st = Job(v1::FAILED, 3);
  st.mutable_spec()->add_argv("/bin/train");
  st.mutable_spec()->add_argv("--lr");
  st.mutable_spec()->set_np(2);
  for (int r = 0; r < 2; ++r) {
    v1::RankStatus* rs = st.add_ranks();
    rs->mutable_placement()->set_rank(r);
    rs->mutable_placement()->set_host("h");
    rs->mutable_placement()->set_local_size(2);
    rs->mutable_placement()->set_local_rank(r);
    rs->set_state(r == 0 ? v1::RANK_KILLED : v1::RANK_EXITED);
    rs->set_pid(100 + r);
    rs->set_exit_code(r == 0 ? 0 : 3);
    rs->set_signal(r == 0 ? 15 : 0);
  }
  const std::string d = JobDetail(st, 5000);
  EXPECT_HAS(d, "job:       j1\nstate:     FAILED, exit code 3\n");
  EXPECT_HAS(d, "job j1 failed\n");
  EXPECT_EQ(d.find("hvdrun:"), std::string::npos) << d;
  EXPECT_HAS(d, "/bin/train --lr");
  EXPECT_HAS(d, "RANK  HOST  LOCAL  STATE");
  EXPECT_HAS(d, "0     h     0/2    KILLED  100  SIGTERM");
  EXPECT_HAS(d, "1     h     1/2    EXITED  101  exit 3");
  EXPECT_EQ(d.find("network:"), std::string::npos) << d;  // nothing decided: one host
  st.mutable_network()->set_decided(true);
  st.mutable_network()->set_summary("using eth0 (10.0.0.0/24) on all 2 hosts");
  EXPECT_HAS(JobDetail(st, 5000), "network:   using eth0 (10.0.0.0/24) on all 2 hosts\n");
  EXPECT_EQ(d.find("attempt"), std::string::npos) << d;  // no restarts asked for
}

TEST(JobDetail, ShowsAttemptsEarlierFailuresAndAStall) {
  v1::JobStatus st = Job(v1::RUNNING, 0);
  st.mutable_spec()->set_max_restarts(2);
  st.set_attempt(1);
  st.add_previous_failures()->set_message("rank 1 on h exited with code 3");
  st.set_stall("rank 3 on h has not responded for 12 s: rank 0 waits for it");
  st.set_stall_since_ms(3000);
  const std::string d = JobDetail(st, 15000);
  EXPECT_HAS(d, "attempt:   2 of 3 (--max-restarts 2)\n");
  EXPECT_HAS(d, "attempt 1: failed: rank 1 on h exited with code 3\n");
  EXPECT_HAS(d,
             "stalled:   rank 3 on h has not responded for 12 s: rank 0 waits for it (since "
             "12.0 s ago)\n");
}

// `hvdrun status JOB` for each state: only a job that failed says "failed", only a cancelled one
// "cancelled"; a job still waiting says how long.
TEST(JobDetail, SaysWhatEachStateMeans) {
  struct Case {
    v1::JobState state;
    const char* reason;
    const char* state_line;
  };
  const Case cases[] = {
      {v1::PENDING, "needs 4 slots, 2 free", "state:     PENDING\n"},
      {v1::STARTING, "starting 2 ranks on 1 agent", "state:     STARTING\n"},
      {v1::RUNNING, "all 2 ranks running", "state:     RUNNING\n"},
      {v1::RESTARTING, "attempt 1 failed: rank 1 on h exited with code 3; restarting",
       "state:     RESTARTING\n"},
      {v1::SUCCEEDED, "all 2 ranks exited with code 0", "state:     SUCCEEDED, exit code 0\n"},
      {v1::FAILED, "rank 1 on h exited with code 3", "state:     FAILED, exit code 3\n"},
      {v1::CANCELLED, "cancelled: by a user", "state:     CANCELLED, exit code 130\n"},
  };
  for (const Case& c : cases) {
    v1::JobStatus st = Job(c.state, c.state == v1::FAILED ? 3 : c.state == v1::CANCELLED ? 130 : 0);
    st.set_reason(c.reason);
    st.set_submit_time_ms(1000);
    st.set_queued_since_ms(1000);
    const std::string d = JobDetail(st, 6000);
    const std::string name = JobStateText(c.state);
    EXPECT_HAS(d, c.state_line);
    EXPECT_HAS(d, std::string("reason:    ") + c.reason + "\n");
    const bool failed = c.state == v1::FAILED;
    const bool cancelled = c.state == v1::CANCELLED;
    EXPECT_EQ(d.find("job j1 failed") != std::string::npos, failed) << name << ":\n" << d;
    EXPECT_EQ(d.find("job j1 was cancelled") != std::string::npos, cancelled) << name << ":\n" << d;
    EXPECT_EQ(d.find("waiting:   for 5.0 s\n") != std::string::npos, c.state == v1::PENDING)
        << name << ":\n"
        << d;
    // The failure summary hvdrun prints at the end is empty for every state but these two.
    EXPECT_EQ(FailureSummary(st).empty(), !failed && !cancelled) << name;
  }
}

TEST(JobDetail, AWaitingJobShowsItsQueueTimeout) {
  v1::JobStatus st = Job(v1::PENDING, 0);
  st.set_queued_since_ms(10000);
  st.mutable_spec()->set_queue_timeout_ms(60000);
  // Seconds as the launcher's own "waited 61.0 s for slots (--queue-timeout 60.0 s)" has them.
  EXPECT_HAS(JobDetail(st, 22000), "waiting:   for 12.0 s of at most 60.0 s (--queue-timeout)\n");
  EXPECT_EQ(WaitingText(st, 22000), "for 12.0 s of at most 60.0 s (--queue-timeout)");
  st.set_queued_since_ms(0);  // a launcher too old to say
  EXPECT_EQ(WaitingText(st, 22000), "since an unknown time of at most 60.0 s (--queue-timeout)");
}

TEST(RankDirName, PaddedToTheLastRankAsHorovodrunDoes) {
  EXPECT_EQ(RankDirName(0, 1), "rank.0");
  EXPECT_EQ(RankDirName(3, 10), "rank.3");  // ranks 0..9: one digit
  EXPECT_EQ(RankDirName(1, 11), "rank.01");
  EXPECT_EQ(RankDirName(10, 11), "rank.10");
  EXPECT_EQ(RankDirName(7, 101), "rank.007");
  EXPECT_EQ(RankDirName(12, 0), "rank.12");  // np unknown: unpadded
}

TEST_F(Output, WithNpEveryRanksFilesAreCreatedUpFrontAndPadded) {
  std::ofstream(dir_ + "/stale") << "x";
  mkdir((dir_ + "/rank.03").c_str(), 0755);
  std::ofstream(dir_ + "/rank.03/stdout") << "a previous job's line\n";
  std::unique_ptr<OutputSink> sink;
  ASSERT_TRUE(OutputSink::Create(dir_, 12, out_, err_, &sink).ok());
  struct stat st;
  for (int r = 0; r < 12; ++r) {
    const std::string rank_dir = dir_ + "/rank." + (r < 10 ? "0" : "") + std::to_string(r);
    EXPECT_EQ(stat((rank_dir + "/stdout").c_str(), &st), 0) << rank_dir;
    EXPECT_EQ(stat((rank_dir + "/stderr").c_str(), &st), 0) << rank_dir;
  }
  EXPECT_EQ(ReadAll(dir_ + "/rank.03/stdout"), "");  // truncated up front
  sink->Write(Line(3, false, "one"));
  sink->Write(Line(11, true, "two"));
  sink->Write(Line(3, false, "three"));
  EXPECT_EQ(ReadAll(dir_ + "/rank.03/stdout"), "one\nthree\n");
  EXPECT_EQ(ReadAll(dir_ + "/rank.11/stderr"), "two\n");
  EXPECT_EQ(ReadAll(dir_ + "/rank.00/stdout"), "");     // a rank that printed nothing has its files
  EXPECT_NE(stat((dir_ + "/rank.3").c_str(), &st), 0);  // never unpadded
}

TEST_F(Output, WithNpARankFileThatCannotBeCreatedFailsUpFront) {
  std::ofstream(dir_ + "/rank.1") << "a file where rank 1's directory should be";
  std::unique_ptr<OutputSink> sink;
  Status s = OutputSink::Create(dir_, 2, out_, err_, &sink);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(s.message(), "--output-filename: " + dir_ + "/rank.1 exists and is not a directory");
}

TEST(AgentTable, ShowsTheAdvertisedInterface) {
  v1::AgentInfo a;
  a.set_agent_id("ag1");
  a.set_host("node-a");
  a.set_advertise_addr("10.0.0.1");
  a.set_advertise_iface("eth0");
  EXPECT_HAS(AgentTable({a}, 0), "10.0.0.1 (eth0)");
}

}  // namespace
}  // namespace hvd::cli
