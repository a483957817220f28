#include "launcherd/stall_reports.h"

#include "launcherd/job_types.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

namespace hvd::launcherd {
bool ParseStallReport(const std::string& value, StallReport* out) {
  std::istringstream in(value);
  std::string kind, age, blamed;
  if (!std::getline(in, kind) || !std::getline(in, age) || !std::getline(in, blamed)) {
    return false;
  }
  if (kind != "S" && kind != "W") return false;
  out->kind = kind == "S" ? StallReport::Kind::kInspector : StallReport::Kind::kWait;
  char* end = nullptr;
  out->age_s = std::strtod(age.c_str(), &end);
  if (end == age.c_str() || *end != '\0' || !(out->age_s >= 0)) return false;
  out->blamed.clear();
  std::istringstream b(blamed);
  for (std::string item; std::getline(b, item, ',');) {
    const long r = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || r < 0) return false;
    out->blamed.push_back(static_cast<int>(r));
  }
  std::getline(in, out->message, '\0');
  return !out->message.empty();
}

std::string FormatStallReport(const StallReport& r) {
  std::ostringstream out;
  out << (r.kind == StallReport::Kind::kInspector ? "S" : "W") << "\n"
      << static_cast<int64_t>(std::floor(r.age_s)) << "\n";
  for (size_t i = 0; i < r.blamed.size(); ++i) out << (i ? "," : "") << r.blamed[i];
  out << "\n" << r.message;
  return out.str();
}

double OldestStall(const std::map<int, StallReport>& reports) {
  double oldest = 0;
  for (const auto& [rank, r] : reports) oldest = std::max(oldest, r.age_s);
  return oldest;
}

std::set<int> StallCulprits(const std::map<int, StallReport>& reports) {
  std::set<int> culprits;
  for (const auto& [rank, r] : reports) {
    for (int b : r.blamed) {
      if (!reports.count(b)) culprits.insert(b);
    }
  }
  return culprits;
}

std::string SummarizeStalls(const std::map<int, StallReport>& reports,
                            const std::function<std::string(int)>& host_of) {
  if (reports.empty()) return "";
  std::string out;
  for (int c : StallCulprits(reports)) {
    // The coordinator's own words are the most precise: which tensor, which ranks have it.
    const StallReport* inspector = nullptr;
    std::vector<int> waiting;
    double age = 0;
    for (const auto& [rank, r] : reports) {
      if (std::find(r.blamed.begin(), r.blamed.end(), c) == r.blamed.end()) continue;
      if (r.kind == StallReport::Kind::kInspector) inspector = &r;
      if (r.kind == StallReport::Kind::kWait) waiting.push_back(rank);
      age = std::max(age, r.age_s);
    }
    std::string line;
    if (inspector != nullptr) {
      line = inspector->message;
    } else {
      line = "rank " + std::to_string(c) + " on " + host_of(c) + " has not responded for " +
             std::to_string(static_cast<int64_t>(age)) + " s: " + RankList(waiting) +
             (waiting.size() == 1 ? " waits" : " wait") +
             " for it (stopped, or stuck outside hvd?)";
    }
    out += (out.empty() ? "" : "; ") + line;
  }
  if (!out.empty()) return out;
  // No chain ends outside the reports (every blamed rank waits too): show the oldest report.
  const StallReport* oldest = nullptr;
  for (const auto& [rank, r] : reports) {
    if (oldest == nullptr || r.age_s > oldest->age_s) oldest = &r;
  }
  out = oldest->message;
  if (reports.size() > 1) {
    out += " (and " + std::to_string(reports.size() - 1) + " more stall report" +
           (reports.size() > 2 ? "s" : "") + ")";
  }
  return out;
}

}  // namespace hvd::launcherd
