// The timeline through the public API: hvd::StartTimeline/StopTimeline with HVD_TIMELINE=DYNAMIC,
// HVD_TIMELINE=<path> at init (with HVD_TIMELINE_MARK_CYCLES), and the warnings about Horovod
// variables hvd does not implement.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/horovod_env.h"
#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using nlohmann::json;
using testing::Check;
using testing::Contains;
using testing::InitRank;
using testing::RunRanks;

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A complete trace: valid JSON, an array of events.
Status ParseTrace(const std::string& path, json* trace) {
  if (!Exists(path)) return NotFound("no timeline file at " + path);
  const std::string text = ReadFile(path);
  *trace = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (trace->is_discarded()) {
    return Internal(path + " is not valid JSON (" + std::to_string(text.size()) +
                    " bytes): " + text.substr(0, 400));
  }
  if (!trace->is_array()) return Internal(path + " is not a JSON array");
  return Status::OK();
}

// Tensor names of a trace's rows (process_name metadata events).
std::set<std::string> RowNames(const json& trace) {
  std::set<std::string> names;
  for (const json& e : trace) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "process_name") {
      names.insert(e["args"].value("name", ""));
    }
  }
  return names;
}

int CountEvents(const json& trace, const std::string& name) {
  return static_cast<int>(std::count_if(
      trace.begin(), trace.end(), [&](const json& e) { return e.value("name", "") == name; }));
}

std::string Joined(const std::set<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

Status Reduce(const std::string& name) {
  std::vector<float> v(64, 1.0f);
  return Allreduce(name, MakeTensor(v.data(), DataType::kFloat32, 64),
                   MakeTensor(v.data(), DataType::kFloat32, 64));
}

TEST(TimelineApi, FailsBeforeInit) {
  Status start = StartTimeline(::testing::TempDir() + "/never.json");
  EXPECT_EQ(start.code(), StatusCode::kFailedPrecondition) << start.ToString();
  EXPECT_TRUE(Contains(start.message(), "Init")) << start.ToString();
  Status stop = StopTimeline();
  EXPECT_EQ(stop.code(), StatusCode::kFailedPrecondition) << stop.ToString();
}

// HVD_TIMELINE=DYNAMIC: nothing until StartTimeline; Start/Stop preconditions; a second recording
// to another file.
TEST(TimelineApi, DynamicStartStopOnTwoRanks) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    // "DYNAMIC" must not be taken for a file name (relative to the working directory).
    if (chdir(dir.c_str()) != 0) return Internal("chdir " + dir);
    const std::string path = dir + "/first.json", second = dir + "/second.json";
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir, {{"HVD_TIMELINE", "DYNAMIC"}}));
    HVD_RETURN_IF_ERROR(Reduce("before.start"));
    HVD_RETURN_IF_ERROR(Check(!Exists(path) && !Exists(dir + "/DYNAMIC"),
                              "a file was written before StartTimeline"));
    HVD_RETURN_IF_ERROR(Barrier());  // every rank has looked before rank 0 starts writing
    Status stop = StopTimeline();
    HVD_RETURN_IF_ERROR(Check(stop.code() == StatusCode::kFailedPrecondition,
                              "StopTimeline when not started: " + stop.ToString()));
    Status empty = StartTimeline("");
    HVD_RETURN_IF_ERROR(Check(empty.code() == StatusCode::kInvalidArgument,
                              "StartTimeline(\"\"): " + empty.ToString()));

    HVD_RETURN_IF_ERROR_CTX(StartTimeline(path), "StartTimeline");
    if (rank == 0) {
      HVD_RETURN_IF_ERROR(Check(Exists(path), "rank 0 did not create " + path + " at start"));
    }
    Status again = StartTimeline(second);
    HVD_RETURN_IF_ERROR(
        Check(again.code() == StatusCode::kFailedPrecondition && Contains(again.message(), path),
              "StartTimeline twice: want FAILED_PRECONDITION naming the file "
              "being written, got " +
                  again.ToString()));
    for (int i = 0; i < 3; ++i) HVD_RETURN_IF_ERROR(Reduce("traced.grad"));
    HVD_RETURN_IF_ERROR_CTX(StopTimeline(), "StopTimeline");
    stop = StopTimeline();
    HVD_RETURN_IF_ERROR(Check(stop.code() == StatusCode::kFailedPrecondition,
                              "StopTimeline twice: " + stop.ToString()));
    HVD_RETURN_IF_ERROR(Barrier());  // rank 1 reads the file only once rank 0 has stopped

    json trace;
    HVD_RETURN_IF_ERROR(ParseTrace(path, &trace));
    const std::set<std::string> rows = RowNames(trace);
    HVD_RETURN_IF_ERROR(Check(rows.count("traced.grad") == 1 && rows.count("before.start") == 0,
                              "rows of the first recording: " + Joined(rows)));
    HVD_RETURN_IF_ERROR(Check(CountEvents(trace, "ALLREDUCE") > 0, "no ALLREDUCE event"));
    // Horovod's spelling of the negotiation phase, as scripts that read its timelines filter it.
    HVD_RETURN_IF_ERROR(
        Check(CountEvents(trace, "NEGOTIATE_ALLREDUCE") > 0, "no NEGOTIATE_ALLREDUCE event"));
    HVD_RETURN_IF_ERROR(
        Check(CountEvents(trace, "CYCLE_START") == 0, "CYCLE_START without mark_cycles"));

    // An unwritable path: InvalidArgument naming it (rank 0 opens the file; the other ranks
    // cannot know and accept it, so they stop theirs again to stay in step).
    const std::string bad = dir + "/no/such/dir/t.json";
    Status unwritable = StartTimeline(bad);
    if (rank == 0) {
      HVD_RETURN_IF_ERROR(Check(
          unwritable.code() == StatusCode::kInvalidArgument && Contains(unwritable.message(), bad),
          "unwritable path: want INVALID_ARGUMENT naming " + bad + ", got " +
              unwritable.ToString()));
    } else if (unwritable.ok()) {
      HVD_RETURN_IF_ERROR(StopTimeline());
    }

    // Start, stop, start again to a second file, with cycle marks.
    HVD_RETURN_IF_ERROR_CTX(StartTimeline(second, /*mark_cycles=*/true), "second StartTimeline");
    HVD_RETURN_IF_ERROR(Reduce("second.grad"));
    HVD_RETURN_IF_ERROR_CTX(StopTimeline(), "second StopTimeline");
    HVD_RETURN_IF_ERROR(Barrier());
    json trace2;
    HVD_RETURN_IF_ERROR(ParseTrace(second, &trace2));
    const std::set<std::string> rows2 = RowNames(trace2);
    HVD_RETURN_IF_ERROR(Check(rows2.count("second.grad") == 1 && rows2.count("traced.grad") == 0,
                              "rows of the second recording: " + Joined(rows2)));
    HVD_RETURN_IF_ERROR(
        Check(CountEvents(trace2, "CYCLE_START") > 0, "no CYCLE_START with mark_cycles=true"));
    // The first file is left complete and untouched.
    json again_first;
    HVD_RETURN_IF_ERROR(ParseTrace(path, &again_first));
    HVD_RETURN_IF_ERROR(Check(again_first == trace, "the first file changed"));
    HVD_RETURN_IF_ERROR(Barrier());
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// HVD_TIMELINE=<path> records from init; HVD_TIMELINE_MARK_CYCLES=1 adds CYCLE_START events; the
// recording from init can be stopped (and then restarted) through the API.
TEST(TimelineApi, PathAtInitWithMarkCycles) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    const std::string path = dir + "/init.json", after = dir + "/after.json";
    HVD_RETURN_IF_ERROR(
        InitRank(rank, size, dir, {{"HVD_TIMELINE", path}, {"HVD_TIMELINE_MARK_CYCLES", "1"}}));
    HVD_RETURN_IF_ERROR(Reduce("init.grad"));
    Status again = StartTimeline(after);
    HVD_RETURN_IF_ERROR(Check(again.code() == StatusCode::kFailedPrecondition,
                              "StartTimeline while recording from init: " + again.ToString()));
    HVD_RETURN_IF_ERROR_CTX(StopTimeline(), "StopTimeline of the recording from init");
    HVD_RETURN_IF_ERROR(Barrier());
    json trace;
    HVD_RETURN_IF_ERROR(ParseTrace(path, &trace));
    HVD_RETURN_IF_ERROR(
        Check(RowNames(trace).count("init.grad") == 1, "rows: " + Joined(RowNames(trace))));
    HVD_RETURN_IF_ERROR(Check(CountEvents(trace, "CYCLE_START") > 0,
                              "no CYCLE_START with HVD_TIMELINE_MARK_CYCLES=1"));
    // Restarted through the API, without marks this time.
    HVD_RETURN_IF_ERROR(StartTimeline(after));
    HVD_RETURN_IF_ERROR(Reduce("after.grad"));
    HVD_RETURN_IF_ERROR(Barrier());
    HVD_RETURN_IF_ERROR(Shutdown());  // completes the file (rank 0's own Shutdown)
    if (rank != 0) return Status::OK();
    json trace2;
    HVD_RETURN_IF_ERROR(ParseTrace(after, &trace2));
    HVD_RETURN_IF_ERROR(Check(RowNames(trace2).count("after.grad") == 1,
                              "rows after restart: " + Joined(RowNames(trace2))));
    return Check(CountEvents(trace2, "CYCLE_START") == 0,
                 "CYCLE_START in a recording started with mark_cycles=false");
  });
  HVD_EXPECT_RANKS_OK(res);
}

// HVD_TIMELINE=<path> without marks: no CYCLE_START; the file is complete after Shutdown().
TEST(TimelineApi, PathAtInitWithoutMarks) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    const std::string path = dir + "/plain.json";
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir, {{"HVD_TIMELINE", path}}));
    HVD_RETURN_IF_ERROR(Reduce("plain.grad"));
    HVD_RETURN_IF_ERROR(Barrier());
    HVD_RETURN_IF_ERROR(Shutdown());
    if (rank != 0) return Status::OK();
    json trace;
    HVD_RETURN_IF_ERROR(ParseTrace(path, &trace));
    HVD_RETURN_IF_ERROR(
        Check(RowNames(trace).count("plain.grad") == 1, "rows: " + Joined(RowNames(trace))));
    return Check(CountEvents(trace, "CYCLE_START") == 0, "CYCLE_START without marks");
  });
  HVD_EXPECT_RANKS_OK(res);
}

// One tensor name pending in the global set and in a process set at once: two rows, the set's
// named after it, so their events never mix.
TEST(TimelineApi, ProcessSetsHaveRowsOfTheirOwn) {
  auto res = RunRanks(3, [](int rank, int size, const std::string& dir) -> Status {
    const std::string path = dir + "/sets.json";
    InitOptions o;
    o.process_sets = {{0, 1}};
    HVD_RETURN_IF_ERROR(testing::InitRankWith(rank, size, dir, o, {{"HVD_TIMELINE", path}}));
    std::vector<float> a(64, 1.0f), b(64, 1.0f);
    AllreduceOptions in_set;
    in_set.process_set = 1;
    Handle ha = AllreduceAsync("grad", MakeTensor(a.data(), DataType::kFloat32, 64),
                               MakeTensor(a.data(), DataType::kFloat32, 64));
    Handle hb;
    if (rank < 2) {
      hb = AllreduceAsync("grad", MakeTensor(b.data(), DataType::kFloat32, 64),
                          MakeTensor(b.data(), DataType::kFloat32, 64), in_set);
    }
    HVD_RETURN_IF_ERROR(ha.Wait());
    if (rank < 2) HVD_RETURN_IF_ERROR(hb.Wait());
    HVD_RETURN_IF_ERROR(Barrier());
    HVD_RETURN_IF_ERROR(Shutdown());
    if (rank != 0) return Status::OK();
    json trace;
    HVD_RETURN_IF_ERROR(ParseTrace(path, &trace));
    const std::set<std::string> rows = RowNames(trace);
    return Check(rows.count("grad") == 1 && rows.count("grad [process set 1]") == 1,
                 "rows: " + Joined(rows));
  });
  HVD_EXPECT_RANKS_OK(res);
}

// An unwritable HVD_TIMELINE fails Init() on rank 0, naming the variable and the path.
TEST(TimelineApi, UnwritablePathAtInitFailsInit) {
  testing::RunOptions opts;
  opts.failure_grace = std::chrono::milliseconds(15000);
  auto res = RunRanks(
      1,
      [](int, int, const std::string& dir) -> Status {
        const std::string bad = dir + "/missing/t.json";
        setenv("HVD_TIMELINE", bad.c_str(), 1);
        Status s = Init();
        unsetenv("HVD_TIMELINE");
        if (s.ok()) Shutdown();
        return Check(s.code() == StatusCode::kInvalidArgument &&
                         Contains(s.message(), "HVD_TIMELINE") && Contains(s.message(), bad),
                     "Init with an unwritable HVD_TIMELINE: " + s.ToString());
      },
      opts);
  HVD_EXPECT_RANKS_OK(res);
}

// Horovod variables hvd does not implement are reported (Init() logs each as a warning); those
// it reads are not.
TEST(HorovodEnv, UnimplementedVariablesAreReported) {
  setenv("HOROVOD_AUTOTUNE", "1", 1);
  setenv("HOROVOD_FOO", "1", 1);
  setenv("HOROVOD_FUSION_THRESHOLD", "1048576", 1);
  setenv("HOROVOD_CYCLE_TIME", "2", 1);
  setenv("HOROVOD_LOCAL_RANK", "0", 1);
  const std::vector<std::string> got = runtime::core::UnimplementedHorovodVariables();
  for (const char* v : {"HOROVOD_AUTOTUNE", "HOROVOD_FOO", "HOROVOD_FUSION_THRESHOLD",
                        "HOROVOD_CYCLE_TIME", "HOROVOD_LOCAL_RANK"}) {
    unsetenv(v);
  }
  std::string all;
  for (const std::string& w : got) all += "  " + w + "\n";
  auto reported = [&](const std::string& name) {
    return std::any_of(got.begin(), got.end(),
                       [&](const std::string& w) { return w.rfind(name + " ", 0) == 0; });
  };
  EXPECT_TRUE(reported("HOROVOD_AUTOTUNE")) << all;
  EXPECT_TRUE(reported("HOROVOD_FOO")) << all;
  EXPECT_FALSE(reported("HOROVOD_FUSION_THRESHOLD")) << all;
  EXPECT_FALSE(reported("HOROVOD_CYCLE_TIME")) << all;
  EXPECT_FALSE(reported("HOROVOD_LOCAL_RANK")) << all;
  for (const std::string& w : got) {
    if (w.rfind("HOROVOD_AUTOTUNE ", 0) == 0) {
      EXPECT_TRUE(Contains(w, "does not autotune")) << w;
    }
    if (w.rfind("HOROVOD_FOO ", 0) == 0) {
      EXPECT_TRUE(Contains(w, "no such setting")) << w;
    }
  }
  for (const std::string& w : runtime::core::UnimplementedHorovodVariables()) {
    EXPECT_NE(w.rfind("HOROVOD_FOO ", 0), 0u) << "reported after unsetenv: " << w;
  }
}

}  // namespace
}  // namespace hvd
