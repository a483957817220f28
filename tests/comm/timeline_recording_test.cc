// Starting and stopping the timeline while the process runs (hvd.start_timeline /
// hvd.stop_timeline): each file holds only what happened while it recorded and is a valid trace,
// misuse fails naming the file, and only a recording timeline holds a thread and a file.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testutil/proc_counts.h"
#include "timeline/timeline.h"
#include "timeline_harness.h"

namespace hvd::runtime::timeline {
namespace {

using hvd::testing::CountEntries;
using hvd::testing::SettledThreadCount;
using hvd::testing::ThreadsSettlingAtMost;
using nlohmann::json;
using test::RunLifecycle;
using test::TensorName;
using test::TimelineTest;

// --- Starting and stopping while the process runs (hvd.start_timeline / hvd.stop_timeline) ---

bool Exists(const std::string& path) {
  return access(path.c_str(), F_OK) == 0;
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
  const size_t threads = SettledThreadCount();
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
  EXPECT_EQ(ThreadsSettlingAtMost(threads), threads);
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
  const size_t threads = SettledThreadCount();
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
    EXPECT_EQ(ThreadsSettlingAtMost(threads), threads) << "after stop " << i;
    EXPECT_EQ(CountEntries("/proc/self/fd"), fds) << "after stop " << i;
  }
  ASSERT_TRUE(tl->Start(path_).ok());
  tl.reset();  // destroyed while recording: stops and joins
  EXPECT_EQ(ThreadsSettlingAtMost(threads), threads);
  EXPECT_EQ(CountEntries("/proc/self/fd"), fds);
  EXPECT_EQ(ReadTrace().size(), 0u);
}

}  // namespace
}  // namespace hvd::runtime::timeline
