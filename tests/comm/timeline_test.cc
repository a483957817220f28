// The timeline must always produce a trace that chrome://tracing and Perfetto load: valid JSON,
// balanced B/E per row, names intact, whatever threads and tensor names throw at it, and however
// often recording is started and stopped while events arrive.
#include "timeline/timeline.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace hvd::runtime::timeline {
namespace {

using nlohmann::json;

class TimelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "hvd_timeline_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/timeline.json";
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::permissions(dir_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(dir_, ec);
  }

  std::string ReadFile() { return ReadFileAt(path_); }
  static std::string ReadFileAt(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  json ReadTrace() { return ReadTraceAt(path_); }
  static json ReadTraceAt(const std::string& path) {
    json j = json::parse(ReadFileAt(path));  // throws (fails the test) on invalid JSON
    EXPECT_TRUE(j.is_array()) << path;
    return j;
  }

  // Tensor (row) names of a trace.
  static std::set<std::string> RowNames(const json& trace) {
    std::set<std::string> names;
    for (auto& [pid, name] : ProcessNames(trace)) names.insert(name);
    return names;
  }

  // pid -> tensor (process) name, from the "M" events.
  static std::map<int, std::string> ProcessNames(const json& trace) {
    std::map<int, std::string> names;
    for (const json& e : trace) {
      if (e["ph"] == "M" && e["name"] == "process_name") {
        EXPECT_EQ(names.count(e["pid"].get<int>()), 0u) << "row named twice: " << e.dump();
        names[e["pid"].get<int>()] = e["args"]["name"].get<std::string>();
      }
    }
    return names;
  }

  // Checks the invariants every row must satisfy and returns the B names per tensor name.
  static std::map<std::string, std::vector<std::string>> CheckRows(const json& trace) {
    std::map<int, std::string> names = ProcessNames(trace);
    std::map<int, int> depth;
    std::map<int, int64_t> last_ts;
    std::map<std::string, std::vector<std::string>> begins;
    for (const json& e : trace) {
      std::string ph = e["ph"];
      int pid = e["pid"];
      EXPECT_EQ(e["tid"], 0);
      if (ph == "M") continue;
      EXPECT_EQ(names.count(pid), 1u) << "event on an unnamed row: " << e.dump();
      int64_t ts = e["ts"];
      if (last_ts.count(pid)) {
        EXPECT_GE(ts, last_ts[pid]) << e.dump();
      }
      last_ts[pid] = ts;
      if (ph == "B") {
        ++depth[pid];
        begins[names[pid]].push_back(e["name"]);
      } else if (ph == "E") {
        EXPECT_GT(depth[pid], 0) << "E without B on " << names[pid];
        --depth[pid];
      } else {
        EXPECT_EQ(ph, "i") << e.dump();
      }
    }
    for (auto& [pid, d] : depth) EXPECT_EQ(d, 0) << "unbalanced row " << names[pid];
    return begins;
  }

  std::string dir_;
  std::string path_;
};

// One tensor's life as the engine reports it.
void RunLifecycle(Timeline* tl, const std::string& name, int ranks, const Status& status) {
  tl->NegotiateStart(name, "ALLREDUCE");
  for (int r = 0; r < ranks; ++r) tl->NegotiateRankReady(name, r);
  tl->NegotiateEnd(name);
  tl->ActivityStart(name, "QUEUE");
  tl->ActivityStart(name, "MEMCPY_IN_FUSION_BUFFER");  // ends QUEUE
  tl->ActivityStart(name, "ALLREDUCE", R"({"algorithm":"ring","bytes":4096})");
  tl->ActivityEnd(name);
  tl->ActivityStart(name, "MEMCPY_OUT_FUSION_BUFFER");
  tl->End(name, status);
}

std::string TensorName(int thread, int i) {
  std::string name = "t";  // appended piecewise: GCC 12 warns (-Wrestrict) on "t" + to_string()
  name += std::to_string(thread);
  name += "/grad_";
  name += std::to_string(i);
  return name;
}

TEST_F(TimelineTest, ManyTensorsFromManyThreadsGiveAValidBalancedTrace) {
  std::unique_ptr<Timeline> tl;
  ASSERT_TRUE(Timeline::Open(path_, &tl).ok());
  constexpr int kThreads = 4, kTensorsPerThread = 50, kRounds = 3, kRanks = 4;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        for (int i = 0; i < kTensorsPerThread; ++i) {
          RunLifecycle(tl.get(), TensorName(t, i), kRanks, Status::OK());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  tl->Close();

  json trace = ReadTrace();
  std::map<std::string, std::vector<std::string>> begins = CheckRows(trace);
  std::set<std::string> names;
  for (auto& [pid, name] : ProcessNames(trace)) names.insert(name);
  ASSERT_EQ(names.size(), size_t{kThreads * kTensorsPerThread});
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kTensorsPerThread; ++i) {
      std::string name = TensorName(t, i);
      ASSERT_EQ(names.count(name), 1u) << name;
      std::vector<std::string> expected;
      for (int round = 0; round < kRounds; ++round) {
        expected.insert(expected.end(), {"NEGOTIATE_ALLREDUCE", "QUEUE", "MEMCPY_IN_FUSION_BUFFER",
                                         "ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER"});
      }
      EXPECT_EQ(begins[name], expected) << name;
    }
  }
  int ready = 0;
  for (const json& e : trace) {
    if (e["ph"] == "i") {
      ++ready;
      EXPECT_EQ(e["name"], "rank " + std::to_string(e["args"]["rank"].get<int>()) + " ready");
    }
    if (e["ph"] == "B" && e["name"] == "ALLREDUCE") {
      EXPECT_EQ(e["args"]["algorithm"], "ring");
      EXPECT_EQ(e["args"]["bytes"], 4096);
    }
  }
  EXPECT_EQ(ready, kThreads * kTensorsPerThread * kRounds * kRanks);
}

TEST_F(TimelineTest, AwkwardNamesSurvive) {
  const std::vector<std::string> names = {
      "quote\"inside",
      "back\\slash",
      "new\nline",
      "tab\tand\rcr",
      std::string("ctl\x01\x1f", 5),
      "unicode \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
      "}],{\"ph\":\"E\"",
      "",
  };
  std::unique_ptr<Timeline> tl;
  ASSERT_TRUE(Timeline::Open(path_, &tl).ok());
  for (const std::string& n : names) RunLifecycle(tl.get(), n, 2, Status::OK());
  tl->ActivityStart("args", "ALLREDUCE", "not an object");
  tl->End("args", Status::OK());
  tl->Close();

  json trace = ReadTrace();
  CheckRows(trace);
  std::set<std::string> seen;
  for (auto& [pid, name] : ProcessNames(trace)) seen.insert(name);
  for (const std::string& n : names) EXPECT_EQ(seen.count(n), 1u) << json(n).dump();
  bool wrapped = false;
  for (const json& e : trace) {
    if (e.contains("args") && e["args"].contains("text")) {
      wrapped = e["args"]["text"] == "not an object";
    }
  }
  EXPECT_TRUE(wrapped) << "malformed args are kept as text";
}

TEST_F(TimelineTest, InvalidUtf8IsReplacedNotPassedThrough) {
  std::unique_ptr<Timeline> tl;
  ASSERT_TRUE(Timeline::Open(path_, &tl).ok());
  tl->ActivityStart("bad\xff\xc3(", "QUEUE");
  tl->ActivityEnd("bad\xff\xc3(");
  tl->Close();
  json trace = ReadTrace();
  auto names = ProcessNames(trace);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names.begin()->second, "bad\xef\xbf\xbd\xef\xbf\xbd(");
}

TEST_F(TimelineTest, ActivityStartEndsWhateverIsOpen) {
  std::unique_ptr<Timeline> tl;
  ASSERT_TRUE(Timeline::Open(path_, &tl).ok());
  tl->NegotiateStart("x", "BROADCAST");
  tl->ActivityStart("x", "QUEUE");  // negotiation never formally ended
  tl->ActivityEnd("x");
  tl->ActivityEnd("x");   // nothing open: ignored
  tl->NegotiateEnd("x");  // nothing open: ignored
  tl->NegotiateStart("y", "ALLGATHER");
  tl->End("y", Status::OK());  // closes the negotiation
  tl->Close();
  auto begins = CheckRows(ReadTrace());
  EXPECT_EQ(begins["x"], (std::vector<std::string>{"NEGOTIATE_BROADCAST", "QUEUE"}));
  EXPECT_EQ(begins["y"], (std::vector<std::string>{"NEGOTIATE_ALLGATHER"}));
}

TEST_F(TimelineTest, FailedEndCarriesTheStatus) {
  std::unique_ptr<Timeline> tl;
  ASSERT_TRUE(Timeline::Open(path_, &tl).ok());
  tl->ActivityStart("a", "ALLREDUCE");
  tl->End("a", Aborted("rank 2 died"));
  tl->End("b", Unavailable("never started"));  // nothing open: an instant event keeps the status
  tl->Marker("shutdown");
  tl->Close();
  json trace = ReadTrace();
  CheckRows(trace);
  std::vector<std::string> statuses;
  bool marker = false;
  for (const json& e : trace) {
    if (e.contains("args") && e["args"].contains("status")) statuses.push_back(e["args"]["status"]);
    if (e["ph"] == "i" && e["name"] == "shutdown") marker = true;
  }
  EXPECT_EQ(statuses,
            (std::vector<std::string>{"ABORTED: rank 2 died", "UNAVAILABLE: never started"}));
  EXPECT_TRUE(marker);
}

TEST_F(TimelineTest, OpenOnAnUnwritablePathNamesPathAndErrno) {
  std::unique_ptr<Timeline> tl;
  std::string bad = dir_ + "/no/such/dir/t.json";
  Status s = Timeline::Open(bad, &tl);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(bad), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("No such file or directory"), std::string::npos) << s.ToString();
  EXPECT_EQ(tl, nullptr);

  s = Timeline::Open(dir_, &tl);  // a directory
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(dir_), std::string::npos) << s.ToString();
}

TEST_F(TimelineTest, CloseIsIdempotentAndLaterEventsAreDropped) {
  std::unique_ptr<Timeline> tl;
  ASSERT_TRUE(Timeline::Open(path_, &tl).ok());
  tl->ActivityStart("a", "QUEUE");
  tl->Close();
  tl->Close();
  tl->ActivityStart("late", "QUEUE");
  tl.reset();  // the destructor closes again
  json trace = ReadTrace();
  auto begins = CheckRows(trace);  // Close() ended the open QUEUE
  EXPECT_EQ(begins["a"], std::vector<std::string>{"QUEUE"});
  auto names = ProcessNames(trace);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names.begin()->second, "a");
}

// While the run goes on the file is a trace without its closing bracket (which Chrome accepts):
// the writer must get events to disk without waiting for Close().
TEST_F(TimelineTest, EventsReachTheDiskBeforeClose) {
  std::unique_ptr<Timeline> tl;
  ASSERT_TRUE(Timeline::Open(path_, &tl).ok());
  tl->ActivityStart("early", "QUEUE");
  tl->ActivityEnd("early");
  json partial;
  for (int i = 0; i < 500; ++i) {
    partial = json::parse(ReadFile() + "]", nullptr, /*allow_exceptions=*/false);
    if (partial.is_array() && partial.size() == 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(partial.is_array()) << ReadFile();
  ASSERT_EQ(partial.size(), 3u) << ReadFile();
  EXPECT_EQ(partial[1]["name"], "QUEUE");
  tl->Close();
  EXPECT_EQ(ReadTrace().size(), 3u);
}

TEST_F(TimelineTest, EmptyTimelineAndDestructorWithoutClose) {
  {
    std::unique_ptr<Timeline> tl;
    ASSERT_TRUE(Timeline::Open(path_, &tl).ok());
  }
  EXPECT_TRUE(ReadTrace().empty());
  {
    std::unique_ptr<Timeline> tl;
    ASSERT_TRUE(Timeline::Open(path_, &tl).ok());  // truncates
    tl->Marker("hello");
  }
  json trace = ReadTrace();
  ASSERT_EQ(trace.size(), 2u);  // the marker row's name + the marker
  EXPECT_EQ(trace[1]["name"], "hello");
}

// --- Starting and stopping while the process runs (hvd.start_timeline / hvd.stop_timeline) ---

bool Exists(const std::string& path) {
  return access(path.c_str(), F_OK) == 0;
}

// Entries of a /proc/self directory (threads in task/, open descriptors in fd/).
size_t CountEntries(const char* dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

// A joined thread may stay listed in /proc/self/task for a moment after pthread_join returns (the
// kernel clears the joiner's tid before it reaps the task), so wait a little for the count.
size_t ThreadsSettlingAt(size_t expected) {
  size_t n = CountEntries("/proc/self/task");
  for (int i = 0; i < 200 && n != expected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    n = CountEntries("/proc/self/task");
  }
  return n;
}

const std::vector<std::string> kLifecyclePhases = {"NEGOTIATE_ALLREDUCE", "QUEUE",
                                                   "MEMCPY_IN_FUSION_BUFFER", "ALLREDUCE",
                                                   "MEMCPY_OUT_FUSION_BUFFER"};

TEST(TimelineSettingTest, ParsesLikeHorovod) {
  TimelineSetting off = ParseTimelineSetting("");
  EXPECT_TRUE(off.path.empty());
  EXPECT_FALSE(off.dynamic);
  TimelineSetting dynamic = ParseTimelineSetting("DYNAMIC");
  EXPECT_TRUE(dynamic.path.empty());
  EXPECT_TRUE(dynamic.dynamic);
  // Horovod compares case-sensitively: anything else is a file name.
  TimelineSetting lower = ParseTimelineSetting("dynamic");
  EXPECT_EQ(lower.path, "dynamic");
  EXPECT_FALSE(lower.dynamic);
  TimelineSetting path = ParseTimelineSetting("/tmp/trace.json");
  EXPECT_EQ(path.path, "/tmp/trace.json");
  EXPECT_FALSE(path.dynamic);
}

TEST_F(TimelineTest, StartStopStartAgainWritesOnlyWhatHappenedWhileRecording) {
  std::unique_ptr<Timeline> tl = Timeline::Create();
  ASSERT_NE(tl, nullptr);
  EXPECT_FALSE(tl->recording());
  RunLifecycle(tl.get(), "before", 2, Status::OK());
  tl->Marker("before");
  EXPECT_FALSE(Exists(path_)) << "a stopped timeline creates no file";

  ASSERT_TRUE(tl->Start(path_).ok());
  EXPECT_TRUE(tl->recording());
  RunLifecycle(tl.get(), "first", 2, Status::OK());
  tl->Marker("first");
  ASSERT_TRUE(tl->Stop().ok());
  EXPECT_FALSE(tl->recording());

  RunLifecycle(tl.get(), "between", 2, Status::OK());
  tl->Marker("between");

  const std::string second = dir_ + "/second.json";
  ASSERT_TRUE(tl->Start(second).ok());
  RunLifecycle(tl.get(), "second", 2, Status::OK());
  tl->Marker("second");
  ASSERT_TRUE(tl->Stop().ok());
  RunLifecycle(tl.get(), "after", 2, Status::OK());

  for (const auto& [path, name] : {std::pair{path_, "first"}, std::pair{second, "second"}}) {
    json trace = ReadTraceAt(path);
    auto begins = CheckRows(trace);
    EXPECT_EQ(RowNames(trace), (std::set<std::string>{name, "hvd"})) << path;  // + marker row
    EXPECT_EQ(begins[name], kLifecyclePhases) << path;
    std::vector<std::string> markers;
    for (const json& e : trace) {
      if (e["ph"] == "i" && e["pid"] == 0) markers.push_back(e["name"]);
    }
    EXPECT_EQ(markers, std::vector<std::string>{name}) << path;
  }

  // The same path again: truncated, a fresh trace.
  ASSERT_TRUE(tl->Start(path_).ok());
  tl->ActivityStart("third", "QUEUE");
  ASSERT_TRUE(tl->Stop().ok());
  json trace = ReadTrace();
  EXPECT_EQ(RowNames(trace), std::set<std::string>{"third"});
  EXPECT_EQ(CheckRows(trace)["third"], std::vector<std::string>{"QUEUE"});  // ended by Stop()
}

TEST_F(TimelineTest, StartWhileRecordingIsFailedPreconditionNamingTheFile) {
  std::unique_ptr<Timeline> tl = Timeline::Create();
  ASSERT_TRUE(tl->Start(path_).ok());
  tl->ActivityStart("a", "QUEUE");
  const std::string other = dir_ + "/other.json";
  Status s = tl->Start(other, /*mark_cycles=*/true);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find(path_), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("stop_timeline()"), std::string::npos) << s.ToString();
  EXPECT_FALSE(Exists(other));
  EXPECT_TRUE(tl->recording());
  tl->MarkCycle();  // the failed Start did not turn cycle marks on
  tl->ActivityEnd("a");
  ASSERT_TRUE(tl->Stop().ok());
  json trace = ReadTrace();
  EXPECT_EQ(CheckRows(trace)["a"], std::vector<std::string>{"QUEUE"});
  EXPECT_EQ(RowNames(trace), std::set<std::string>{"a"});
}

TEST_F(TimelineTest, StopWhenNotRecordingIsFailedPrecondition) {
  std::unique_ptr<Timeline> tl = Timeline::Create();
  Status s = tl->Stop();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("start_timeline(path)"), std::string::npos) << s.ToString();
  ASSERT_TRUE(tl->Start(path_).ok());
  ASSERT_TRUE(tl->Stop().ok());
  EXPECT_EQ(tl->Stop().code(), StatusCode::kFailedPrecondition);
  tl->Close();  // the shutdown path: no error, nothing to do
  EXPECT_TRUE(ReadTrace().empty());
}

TEST_F(TimelineTest, StartOnAMissingDirectoryIsInvalidArgumentAndLeavesItStopped) {
  std::unique_ptr<Timeline> tl = Timeline::Create();
  const std::string bad = dir_ + "/no/such/dir/t.json";
  Status s = tl->Start(bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(bad), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("No such file or directory"), std::string::npos) << s.ToString();
  EXPECT_FALSE(tl->recording());
  EXPECT_EQ(tl->Stop().code(), StatusCode::kFailedPrecondition);
  // Still usable.
  ASSERT_TRUE(tl->Start(path_).ok());
  tl->Marker("ok");
  ASSERT_TRUE(tl->Stop().ok());
  EXPECT_EQ(ReadTrace().size(), 2u);
}

TEST_F(TimelineTest, StartInADirectoryWithoutWritePermissionIsInvalidArgument) {
  if (geteuid() == 0) GTEST_SKIP() << "root may write into any directory";
  const std::string ro = dir_ + "/read-only";
  ASSERT_EQ(mkdir(ro.c_str(), 0555), 0);
  std::unique_ptr<Timeline> tl = Timeline::Create();
  const std::string bad = ro + "/t.json";
  Status s = tl->Start(bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(bad), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("Permission denied"), std::string::npos) << s.ToString();
  EXPECT_FALSE(tl->recording());
}

TEST_F(TimelineTest, EmptyPathIsInvalidArgument) {
  for (bool writes_file : {true, false}) {
    std::unique_ptr<Timeline> tl = Timeline::Create(writes_file);
    Status s = tl->Start("");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("empty"), std::string::npos) << s.ToString();
    EXPECT_EQ(tl->Stop().code(), StatusCode::kFailedPrecondition);
  }
}

// Ranks other than 0 write nothing, yet start_timeline()/stop_timeline() must answer there as on
// rank 0 (the same call runs on every rank).
TEST_F(TimelineTest, ANonWritingTimelineKeepsTheStateButWritesNothing) {
  const size_t threads = ThreadsSettlingAt(CountEntries("/proc/self/task"));
  const size_t fds = CountEntries("/proc/self/fd");
  std::unique_ptr<Timeline> tl = Timeline::Create(/*writes_file=*/false);
  ASSERT_TRUE(tl->Start(path_, /*mark_cycles=*/true).ok());
  EXPECT_FALSE(tl->recording());
  EXPECT_EQ(CountEntries("/proc/self/task"), threads);
  EXPECT_EQ(CountEntries("/proc/self/fd"), fds);
  RunLifecycle(tl.get(), "t", 2, Status::OK());
  tl->MarkCycle();
  Status s = tl->Start(dir_ + "/other.json");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find(path_), std::string::npos) << s.ToString();
  EXPECT_TRUE(tl->Stop().ok());
  EXPECT_EQ(tl->Stop().code(), StatusCode::kFailedPrecondition);
  // Not even opened: a path only rank 0 can write is fine on the others.
  EXPECT_TRUE(tl->Start(dir_ + "/no/such/dir/t.json").ok());
  tl.reset();
  EXPECT_FALSE(Exists(path_));
  EXPECT_EQ(ThreadsSettlingAt(threads), threads);
}

// A write that fails (here: a full disk) is reported by Stop(), naming the file.
TEST_F(TimelineTest, StopReportsAFailedWrite) {
  if (!Exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  std::unique_ptr<Timeline> tl = Timeline::Create();
  ASSERT_TRUE(tl->Start("/dev/full").ok());
  tl->Marker("lost");
  Status s = tl->Stop();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("/dev/full"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.ToString();
  // The next recording starts clean.
  ASSERT_TRUE(tl->Start(path_).ok());
  EXPECT_TRUE(tl->Stop().ok());
  EXPECT_TRUE(ReadTrace().empty());
}

TEST_F(TimelineTest, MarkCyclesAddsCycleStartInstantsOnlyWhenAskedFor) {
  auto cycle_marks = [](const json& trace) {
    int n = 0;
    for (const json& e : trace) {
      if (e["name"] == "CYCLE_START") {
        EXPECT_EQ(e["ph"], "i") << e.dump();
        EXPECT_EQ(e["s"], "g") << e.dump();  // global, as Horovod's
        ++n;
      }
    }
    return n;
  };
  std::unique_ptr<Timeline> tl = Timeline::Create();
  tl->MarkCycle();  // stopped: nothing
  ASSERT_TRUE(tl->Start(path_, /*mark_cycles=*/true).ok());
  for (int i = 0; i < 3; ++i) {
    tl->MarkCycle();
    RunLifecycle(tl.get(), "t", 1, Status::OK());
  }
  ASSERT_TRUE(tl->Stop().ok());
  tl->MarkCycle();
  json marked = ReadTrace();
  CheckRows(marked);
  EXPECT_EQ(cycle_marks(marked), 3);

  const std::string unmarked_path = dir_ + "/unmarked.json";
  ASSERT_TRUE(tl->Start(unmarked_path).ok());  // mark_cycles defaults to off
  for (int i = 0; i < 3; ++i) {
    tl->MarkCycle();
    RunLifecycle(tl.get(), "t", 1, Status::OK());
  }
  tl->Marker("shutdown");
  ASSERT_TRUE(tl->Stop().ok());
  json unmarked = ReadTraceAt(unmarked_path);
  CheckRows(unmarked);
  EXPECT_EQ(cycle_marks(unmarked), 0);
  EXPECT_EQ(CheckRows(unmarked)["t"].size(), 3 * kLifecyclePhases.size());
}

// A tensor already negotiating or running when recording starts: its open phases are not this
// file's, so their ends are dropped instead of producing an "E" without its "B".
TEST_F(TimelineTest, PhasesBegunBeforeStartGetNoEnd) {
  std::unique_ptr<Timeline> tl = Timeline::Create();
  tl->NegotiateStart("x", "ALLREDUCE");
  tl->ActivityStart("x", "QUEUE");
  tl->ActivityStart("y", "ALLREDUCE");
  ASSERT_TRUE(tl->Start(path_).ok());
  tl->ActivityEnd("x");
  tl->NegotiateEnd("x");
  tl->End("x", Status::OK());
  tl->ActivityStart("y", "MEMCPY_OUT_FUSION_BUFFER");  // begins in this recording: kept
  tl->End("y", Status::OK());
  tl->ActivityStart("z", "ALLREDUCE");  // still open at Stop(): ended there
  ASSERT_TRUE(tl->Stop().ok());
  tl->ActivityEnd("z");
  auto begins = CheckRows(ReadTrace());
  EXPECT_TRUE(begins["x"].empty());
  EXPECT_EQ(begins["y"], std::vector<std::string>{"MEMCPY_OUT_FUSION_BUFFER"});
  EXPECT_EQ(begins["z"], std::vector<std::string>{"ALLREDUCE"});
}

// The engine's background thread keeps reporting while user threads start and stop recording:
// every file produced must be a complete, balanced trace, and a Start() that loses a race gets
// FailedPrecondition, never a half-made file.
TEST_F(TimelineTest, EventsWhileOtherThreadsStartAndStopGiveValidFiles) {
  std::unique_ptr<Timeline> tl = Timeline::Create();
  std::atomic<bool> done{false};
  std::atomic<int64_t> lifecycles{0};
  std::vector<std::thread> producers;
  for (int t = 0; t < 2; ++t) {
    producers.emplace_back([&, t] {
      for (int i = 0; !done.load(); ++i) {
        tl->MarkCycle();
        RunLifecycle(tl.get(), TensorName(t, i % 64), 2, i % 7 == 0 ? Aborted("x") : Status::OK());
        if (i % 50 == 0) tl->Marker("tick");
        lifecycles.fetch_add(1);
      }
    });
  }
  constexpr int kControllers = 2, kCycles = 50;
  std::vector<std::vector<std::string>> started(kControllers);
  std::vector<std::thread> controllers;
  for (int c = 0; c < kControllers; ++c) {
    controllers.emplace_back([&, c] {
      for (int i = 0; i < kCycles; ++i) {
        std::string path = dir_ + "/c" + std::to_string(c) + "_" + std::to_string(i) + ".json";
        Status s = tl->Start(path, /*mark_cycles=*/i % 2 == 0);
        if (s.ok()) {
          started[c].push_back(path);
        } else {
          EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
          EXPECT_FALSE(Exists(path)) << path;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200 * (i % 5)));
        s = tl->Stop();  // may stop the other controller's recording, or find none
        EXPECT_TRUE(s.ok() || s.code() == StatusCode::kFailedPrecondition) << s.ToString();
      }
    });
  }
  for (auto& th : controllers) th.join();
  done = true;
  for (auto& th : producers) th.join();
  EXPECT_FALSE(tl->recording());
  EXPECT_GT(lifecycles.load(), 0);

  size_t files = 0, with_events = 0;
  for (const auto& paths : started) {
    for (const std::string& path : paths) {
      ++files;
      json trace;
      ASSERT_NO_THROW(trace = ReadTraceAt(path)) << path << ":\n" << ReadFileAt(path);
      CheckRows(trace);
      if (!trace.empty()) ++with_events;
    }
  }
  EXPECT_GE(files, size_t{kCycles});  // at least one controller's Start wins each round
  EXPECT_GT(with_events, 0u);
}

// A stopped timeline holds no thread and no descriptor (processes init and shut hvd down many
// times); a recording one holds exactly one of each.
TEST_F(TimelineTest, OnlyARecordingTimelineHoldsAThreadAndAFile) {
  const size_t threads = ThreadsSettlingAt(CountEntries("/proc/self/task"));
  const size_t fds = CountEntries("/proc/self/fd");
  std::unique_ptr<Timeline> tl = Timeline::Create();
  EXPECT_EQ(CountEntries("/proc/self/task"), threads);
  EXPECT_EQ(CountEntries("/proc/self/fd"), fds);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(tl->Start(path_, i % 2 == 0).ok());
    EXPECT_EQ(CountEntries("/proc/self/task"), threads + 1);
    EXPECT_EQ(CountEntries("/proc/self/fd"), fds + 1);
    RunLifecycle(tl.get(), "t", 1, Status::OK());
    ASSERT_TRUE(tl->Stop().ok());
    EXPECT_EQ(ThreadsSettlingAt(threads), threads) << "after stop " << i;
    EXPECT_EQ(CountEntries("/proc/self/fd"), fds) << "after stop " << i;
  }
  ASSERT_TRUE(tl->Start(path_).ok());
  tl.reset();  // destroyed while recording: stops and joins
  EXPECT_EQ(ThreadsSettlingAt(threads), threads);
  EXPECT_EQ(CountEntries("/proc/self/fd"), fds);
  EXPECT_EQ(ReadTrace().size(), 0u);
}

}  // namespace
}  // namespace hvd::runtime::timeline
