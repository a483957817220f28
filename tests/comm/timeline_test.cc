// The timeline must always produce a trace that chrome://tracing and Perfetto load: valid JSON,
// balanced B/E per row, names intact, whatever threads and tensor names throw at it. Starting and
// stopping while events arrive: timeline_recording_test.cc.
#include "timeline/timeline.h"

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "timeline_harness.h"

namespace hvd::runtime::timeline {
namespace {

using nlohmann::json;
using test::RunLifecycle;
using test::TensorName;
using test::TimelineTest;

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

}  // namespace
}  // namespace hvd::runtime::timeline
