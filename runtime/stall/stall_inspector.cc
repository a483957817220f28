#include "stall/stall_inspector.h"

#include <algorithm>
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

bool Has(const std::vector<int>& ranks, int r) {
  return std::find(ranks.begin(), ranks.end(), r) != ranks.end();
}

}  // namespace

void FindCrossing(const std::vector<PendingKey>& pending, PendingKey* p) {
  p->crossing.clear();
  const PendingKey* best = nullptr;
  int by = -1, not_by = -1;
  for (const PendingKey& q : pending) {
    if (q.key == p->key || (best != nullptr && q.first_seen >= best->first_seen)) continue;
    auto submitter = std::find_if(p->missing.begin(), p->missing.end(),
                                  [&](int r) { return Has(q.submitted, r); });
    auto waiter = std::find_if(p->submitted.begin(), p->submitted.end(),
                               [&](int r) { return Has(q.missing, r); });
    if (submitter == p->missing.end() || waiter == p->submitted.end()) continue;
    best = &q;
    by = *submitter;
    not_by = *waiter;
  }
  if (best == nullptr) return;
  p->crossing = "rank " + std::to_string(by) + " has submitted " + best->op + " '" + best->key +
                "', which rank " + std::to_string(not_by) + " has not";
}

std::string CrossingText(const PendingKey& p) {
  if (p.crossing.empty()) return "";
  return "; " + p.crossing +
         ": the ranks wait on each other (they submit collectives in different orders, or under "
         "different names)";
}

StallInspector::StallInspector(double check_seconds, double shutdown_seconds)
    : check_seconds_(check_seconds), shutdown_seconds_(shutdown_seconds) {}

std::string StallInspector::Describe(const PendingKey& p, Clock::time_point now) {
  double age = std::chrono::duration<double>(now - p.first_seen).count();
  std::string s = (p.missing.size() == 1 ? "rank " : "ranks ") + RankList(p.missing) +
                  (p.missing.size() == 1 ? " has" : " have") + " not submitted " + p.op + " '" +
                  p.key + "' for " + std::to_string(static_cast<long long>(age)) + " s (" +
                  (p.submitted.size() == 1 ? "rank " : "ranks ") + RankList(p.submitted) +
                  (p.submitted.size() == 1 ? " has" : " have") + ")" + CrossingText(p);
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
  for (PendingKey p : pending) {
    if (p.missing.empty()) continue;
    FindCrossing(pending, &p);
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
        // With a crossing the description already says which (different orders).
        HVD_LOG(WARNING) << "stall: " << Describe(p, now)
                         << (p.crossing.empty() ? ". A rank is stuck outside hvd or submits "
                                                  "tensors in a different order or with "
                                                  "different names."
                                                : ".");
      }
    }
  }
  return verdicts;
}

}  // namespace hvd::runtime::stall
