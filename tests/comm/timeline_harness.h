// What the timeline suites (timeline_test.cc, timeline_recording_test.cc) share: a fixture with a
// fresh directory and the checks every trace must pass (valid JSON, each row named once, balanced
// B/E, time never going back), and one tensor's life as the engine reports it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "timeline/timeline.h"

namespace hvd::runtime::timeline::test {

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
inline void RunLifecycle(Timeline* tl, const std::string& name, int ranks, const Status& status) {
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

inline std::string TensorName(int thread, int i) {
  std::string name = "t";  // appended piecewise: GCC 12 warns (-Wrestrict) on "t" + to_string()
  name += std::to_string(thread);
  name += "/grad_";
  name += std::to_string(i);
  return name;
}

}  // namespace hvd::runtime::timeline::test
