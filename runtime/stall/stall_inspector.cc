#include "stall/stall_inspector.h"

#include <cstdio>

#include "base/logging.h"

namespace hvd::runtime::stall {
namespace {

std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

}  // namespace

StallInspector::StallInspector(double check_seconds, double shutdown_seconds)
    : check_seconds_(check_seconds), shutdown_seconds_(shutdown_seconds) {}

std::string StallInspector::Describe(const PendingKey& p, Clock::time_point now) {
  double age = std::chrono::duration<double>(now - p.first_seen).count();
  std::string s = (p.missing.size() == 1 ? "rank " : "ranks ") + RankList(p.missing) +
                  (p.missing.size() == 1 ? " has" : " have") + " not submitted " + p.op + " '" +
                  p.key + "' for " + std::to_string(static_cast<long long>(age)) + " s (" +
                  (p.submitted.size() == 1 ? "rank " : "ranks ") + RankList(p.submitted) +
                  (p.submitted.size() == 1 ? " has" : " have") + ")";
  return s;
}

std::string StallInspector::ShutdownSetting(double shutdown_seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", shutdown_seconds);  // "60", "2.5": as the user set it
  return std::string("HVD_STALL_SHUTDOWN_TIME_SECONDS=") + buf;
}

std::vector<StallVerdict> StallInspector::Inspect(const std::vector<PendingKey>& pending,
                                                  Clock::time_point now) {
  std::vector<StallVerdict> verdicts;
  if (check_seconds_ <= 0 && shutdown_seconds_ <= 0) return verdicts;
  const auto check = std::chrono::duration<double>(check_seconds_);
  for (const PendingKey& p : pending) {
    if (p.missing.empty()) continue;
    const auto age = now - p.first_seen;
    if (shutdown_seconds_ > 0 && age >= std::chrono::duration<double>(shutdown_seconds_)) {
      verdicts.push_back({p, "stalled: " + Describe(p, now) + "; failing it after " +
                                 ShutdownSetting(shutdown_seconds_)});
      continue;
    }
    if (check_seconds_ > 0 && age >= check) {
      auto it = last_warned_.find(p.key);
      if (it == last_warned_.end() || now - it->second >= check) {
        last_warned_[p.key] = now;
        HVD_LOG(WARNING) << "stall: " << Describe(p, now)
                         << ". A rank is stuck outside hvd or submits tensors in a different "
                            "order or with different names.";
      }
    }
  }
  return verdicts;
}

}  // namespace hvd::runtime::stall
