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

control::OutputLine Line(int rank, bool is_stderr, const std::string& text, int64_t seq = 0) {
  control::OutputLine l;
  l.rank = rank;
  l.is_stderr = is_stderr;
  l.text = text;
  l.seq = seq;
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

// An elastic job's worker added later (id >= np) gets a stdout and a stderr file as the first
// ranks do, whichever it writes first (it had only the one it wrote to).
TEST_F(Output, AWorkerAddedLaterGetsBothFiles) {
  std::unique_ptr<OutputSink> sink;
  ASSERT_TRUE(OutputSink::Create(dir_, 2, out_, err_, &sink).ok());
  sink->Write(Line(2, false, "joined"));
  sink->Write(Line(3, true, "warning"));
  sink->Write(Line(3, false, "out"));
  EXPECT_EQ(ReadAll(dir_ + "/rank.2/stdout"), "joined\n");
  EXPECT_EQ(ReadAll(dir_ + "/rank.2/stderr"), "");
  struct stat st;
  EXPECT_EQ(stat((dir_ + "/rank.2/stderr").c_str(), &st), 0);
  EXPECT_EQ(ReadAll(dir_ + "/rank.3/stderr"), "warning\n");
  EXPECT_EQ(ReadAll(dir_ + "/rank.3/stdout"), "out\n");
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

using control::JobState;
using control::RankState;

control::JobStatus Job(JobState state, int exit_code) {
  control::JobStatus st;
  st.id = "j1";
  st.state = state;
  st.exit_code = exit_code;
  return st;
}

TEST(JobExitCode, FollowsTheJob) {
  EXPECT_EQ(JobExitCode(Job(JobState::kSucceeded, 0)), 0);
  EXPECT_EQ(JobExitCode(Job(JobState::kFailed, 3)), 3);
  EXPECT_EQ(JobExitCode(Job(JobState::kFailed, 137)), 137);
  EXPECT_EQ(JobExitCode(Job(JobState::kFailed, 0)), 1);  // never 0 for a failed job
  EXPECT_EQ(JobExitCode(Job(JobState::kCancelled, 0)), 130);
  EXPECT_EQ(JobExitCode(Job(JobState::kCancelled, 143)), 143);
}

TEST(FailureSummary, NamesRankHostCodeAndStderr) {
  control::JobStatus st = Job(JobState::kFailed, 3);
  st.has_failure = true;
  control::JobFailure* f = &st.failure;
  f->rank = 1;
  f->host = "node-b";
  f->exit_code = 3;
  f->stderr_tail = "Traceback:\nValueError: bad shape";
  EXPECT_EQ(FailureSummary(st),
            "hvdrun: job j1 failed: rank 1 on node-b exited with code 3\n"
            "hvdrun: last stderr lines of rank 1:\n"
            "hvdrun:   Traceback:\n"
            "hvdrun:   ValueError: bad shape\n");
  f->message = "rank 1 on node-b exited with code 3 (custom)";
  EXPECT_HAS(FailureSummary(st), "failed: rank 1 on node-b exited with code 3 (custom)\n");
  // An elastic job's failure names a worker id; a tail of blank lines gets no heading (it was
  // "last stderr lines of rank 2:" over nothing).
  st.spec.min_np = 1;
  st.spec.max_np = 4;
  EXPECT_HAS(FailureSummary(st), "hvdrun: last stderr lines of worker 1:\n");
  f->stderr_tail = "\n\n";
  EXPECT_EQ(FailureSummary(st).find("last stderr lines"), std::string::npos) << FailureSummary(st);
}

TEST(FailureSummary, Signal) {
  control::JobStatus st = Job(JobState::kFailed, 139);
  st.has_failure = true;
  st.failure.rank = 0;
  st.failure.host = "a";
  st.failure.signal = 11;
  EXPECT_HAS(FailureSummary(st), "rank 0 on a");
  EXPECT_HAS(FailureSummary(st), "SIGSEGV");
}

TEST(FailureSummary, WithoutARankToBlame) {
  control::JobStatus st = Job(JobState::kFailed, 1);
  st.reason = "needs 8 slots but the hosts offer 4";
  EXPECT_EQ(FailureSummary(st), "hvdrun: job j1 failed: needs 8 slots but the hosts offer 4\n");
  st = Job(JobState::kCancelled, 130);
  st.reason = "hvdrun received SIGINT";
  EXPECT_EQ(FailureSummary(st), "hvdrun: job j1 was cancelled: hvdrun received SIGINT\n");
  st.reason = "cancelled: by hvdrun cancel";  // the launcher's reason: "cancelled" said once
  EXPECT_EQ(FailureSummary(st), "hvdrun: job j1 was cancelled: by hvdrun cancel\n");
  EXPECT_EQ(FailureSummary(Job(JobState::kSucceeded, 0)), "");
}

TEST(FormatDuration, Units) {
  EXPECT_EQ(FormatDuration(0), "0.0 s");
  EXPECT_EQ(FormatDuration(3250), "3.2 s");  // base::SecondsText, as the launcher writes
  EXPECT_EQ(FormatDuration(245000), "4m05s");
  EXPECT_EQ(FormatDuration(7380000), "2h03m");
  EXPECT_EQ(FormatDuration(-5), "-");
}

TEST(Tables, JobsAndAgents) {
  control::JobStatus st = Job(JobState::kRunning, 0);
  st.spec.np = 4;
  st.spec.name = "resnet";
  st.submit_time_ms = 1000;
  st.start_time_ms = 2000;
  const std::string jobs = JobTable({st}, 62000);
  EXPECT_HAS(jobs, "ID  NAME    STATE    NP  SUBMITTED  DURATION  EXIT\n");
  EXPECT_HAS(jobs, "j1  resnet  RUNNING  4   1m01s ago  1m00s     -\n");

  control::AgentInfo a;
  a.id = "ag1";
  a.host = "node-a";
  a.advertise_addr = "10.0.0.1";
  a.state = "READY";
  a.slots = 8;
  a.slots_in_use = 4;
  a.last_heartbeat_ms = 9500;
  const std::string agents = AgentTable({a}, 10000);
  EXPECT_HAS(agents, "AGENT  HOST");
  EXPECT_HAS(agents, "ag1    node-a  10.0.0.1  READY  4/8");
  EXPECT_HAS(agents, "0.5 s ago");
}

TEST(JobDetail, ShowsRanks) {
  control::JobStatus st = Job(JobState::kFailed, 3);
  st.spec.argv = {"/bin/train", "--lr"};
  st.spec.np = 2;
  for (int r = 0; r < 2; ++r) {
    control::RankStatus& rs = st.ranks.emplace_back();
    rs.placement.rank = r;
    rs.placement.host = "h";
    rs.placement.local_size = 2;
    rs.placement.local_rank = r;
    rs.state = r == 0 ? RankState::kKilled : RankState::kExited;
    rs.pid = 100 + r;
    rs.exit_code = r == 0 ? 0 : 3;
    rs.signal = r == 0 ? 15 : 0;
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
  st.network.decided = true;
  st.network.summary = "using eth0 (10.0.0.0/24) on all 2 hosts";
  EXPECT_HAS(JobDetail(st, 5000), "network:   using eth0 (10.0.0.0/24) on all 2 hosts\n");
  EXPECT_EQ(d.find("attempt"), std::string::npos) << d;  // no restarts asked for
  EXPECT_EQ(d.find("run as"), std::string::npos) << d;   // no --run-as: the agent's user
  st.spec.run_as = "alice";
  EXPECT_HAS(JobDetail(st, 5000), "ranks:     2\nrun as:    alice\n");
}

TEST(JobDetail, ShowsAttemptsEarlierFailuresAndAStall) {
  control::JobStatus st = Job(JobState::kRunning, 0);
  st.spec.max_restarts = 2;
  st.attempt = 1;
  st.previous_failures.emplace_back().message = "rank 1 on h exited with code 3";
  st.stall = "rank 3 on h has not responded for 12 s: rank 0 waits for it";
  st.stall_since_ms = 3000;
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
    JobState state;
    const char* reason;
    const char* state_line;
  };
  const Case cases[] = {
      {JobState::kPending, "needs 4 slots, 2 free", "state:     PENDING\n"},
      {JobState::kStarting, "starting 2 ranks on 1 agent", "state:     STARTING\n"},
      {JobState::kRunning, "all 2 ranks running", "state:     RUNNING\n"},
      {JobState::kRestarting, "attempt 1 failed: rank 1 on h exited with code 3; restarting",
       "state:     RESTARTING\n"},
      {JobState::kSucceeded, "all 2 ranks exited with code 0",
       "state:     SUCCEEDED, exit code 0\n"},
      {JobState::kFailed, "rank 1 on h exited with code 3", "state:     FAILED, exit code 3\n"},
      {JobState::kCancelled, "cancelled: by a user", "state:     CANCELLED, exit code 130\n"},
  };
  for (const Case& c : cases) {
    control::JobStatus st = Job(c.state, c.state == JobState::kFailed      ? 3
                                         : c.state == JobState::kCancelled ? 130
                                                                           : 0);
    st.reason = c.reason;
    st.submit_time_ms = 1000;
    st.queued_since_ms = 1000;
    const std::string d = JobDetail(st, 6000);
    const std::string name = JobStateText(c.state);
    EXPECT_HAS(d, c.state_line);
    EXPECT_HAS(d, std::string("reason:    ") + c.reason + "\n");
    const bool failed = c.state == JobState::kFailed;
    const bool cancelled = c.state == JobState::kCancelled;
    EXPECT_EQ(d.find("job j1 failed") != std::string::npos, failed) << name << ":\n" << d;
    EXPECT_EQ(d.find("job j1 was cancelled") != std::string::npos, cancelled) << name << ":\n" << d;
    EXPECT_EQ(d.find("waiting:   for 5.0 s\n") != std::string::npos, c.state == JobState::kPending)
        << name << ":\n"
        << d;
    // The failure summary hvdrun prints at the end is empty for every state but these two.
    EXPECT_EQ(FailureSummary(st).empty(), !failed && !cancelled) << name;
  }
}

TEST(JobDetail, AWaitingJobShowsItsQueueTimeout) {
  control::JobStatus st = Job(JobState::kPending, 0);
  st.queued_since_ms = 10000;
  st.spec.queue_timeout_ms = 60000;
  // Seconds as the launcher's own "waited 61.0 s for slots (--queue-timeout 60.0 s)" has them.
  EXPECT_HAS(JobDetail(st, 22000), "waiting:   for 12.0 s of at most 60.0 s (--queue-timeout)\n");
  EXPECT_EQ(WaitingText(st, 22000), "for 12.0 s of at most 60.0 s (--queue-timeout)");
  st.queued_since_ms = 0;  // a launcher too old to say
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
  control::AgentInfo a;
  a.id = "ag1";
  a.host = "node-a";
  a.advertise_addr = "10.0.0.1";
  a.advertise_iface = "eth0";
  EXPECT_HAS(AgentTable({a}, 0), "10.0.0.1 (eth0)");
}

// An agent a restarted launcher knows only from a job's record: nothing heard from it yet.
TEST(AgentTable, AnAgentNeverHeardFromShowsNoSlotsNorHeartbeat) {
  control::AgentInfo a;
  a.id = "ag1";
  a.host = "node-a";
  a.state = "LOST";
  const std::string t = AgentTable({a}, 10000);
  EXPECT_HAS(t, "LOST   -      -     never");
  EXPECT_EQ(t.find("ago"), std::string::npos) << t;
}

// How a LOST agent went is printed under the table (the launcher's reason; too long for a column).
TEST(AgentTable, ALostAgentsReasonFollowsTheTable) {
  control::AgentInfo a, b;
  a.id = "ag1";
  a.state = "LOST";
  a.lost_reason = "its connection to the launcher closed 5.0 s before";
  b.id = "ag2";
  b.state = "READY";
  b.lost_reason = "stale";  // not LOST: not printed
  const std::string t = AgentTable({a, b}, 10000);
  EXPECT_HAS(t, "VERSION\n");
  EXPECT_HAS(t, "\nag1 lost: its connection to the launcher closed 5.0 s before\n");
  EXPECT_EQ(t.find("stale"), std::string::npos) << t;
  // The five last heard from only, whatever their order in the list (registration's).
  std::vector<control::AgentInfo> many;
  for (int i = 0; i < 8; ++i) {
    control::AgentInfo l;
    l.id = "old" + std::to_string(i);
    l.state = "LOST";
    l.lost_reason = "reason " + std::to_string(i);
    l.last_heartbeat_ms = 1000 + i;
    many.push_back(l);
  }
  many[0].last_heartbeat_ms = 5000;  // registered first, lost last
  const std::string m = AgentTable(many, 10000);
  EXPECT_HAS(m, "\n3 agents lost or stopped earlier not shown\nold4 lost: reason 4\n");
  EXPECT_HAS(m, "old7 lost: reason 7\nold0 lost: reason 0\n");
  EXPECT_EQ(m.find("old3 lost"), std::string::npos) << m;
}

}  // namespace
}  // namespace hvd::cli
