#include "stall/stall_inspector.h"

#include <algorithm>
#include <cstdio>
#include <vector>

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

// Keys whose crossing one Inspect looks for, at most: each look reads every pending key, and a
// job with thousands stalled at once would otherwise pay that thousands of times.
constexpr int kCrossingsPerInspect = 4;

// ranks as a membership table over 0..(largest rank).
std::vector<char> Members(const std::vector<int>& ranks) {
  std::vector<char> in;
  for (int r : ranks) {
    if (r < 0) continue;
    if (static_cast<size_t>(r) >= in.size()) in.resize(r + 1, 0);
    in[r] = 1;
  }
  return in;
}

// The first of `ranks` in `members`, or -1.
int FirstIn(const std::vector<int>& ranks, const std::vector<char>& members) {
  for (int r : ranks) {
    if (r >= 0 && static_cast<size_t>(r) < members.size() && members[r]) return r;
  }
  return -1;
}

}  // namespace

void FindCrossing(const std::vector<PendingKey>& pending, PendingKey* p) {
  p->crossing.clear();
  // Linear in the pending keys and their ranks.
  const std::vector<char> missing = Members(p->missing), submitted = Members(p->submitted);
  const PendingKey* best = nullptr;
  int by = -1, not_by = -1;
  for (const PendingKey& q : pending) {
    if ((best != nullptr && q.first_seen >= best->first_seen) || q.key == p->key) continue;
    const int submitter = FirstIn(q.submitted, missing);  // missing p, submitted q
    if (submitter < 0) continue;
    const int waiter = FirstIn(q.missing, submitted);  // submitted p, missing q
    if (waiter < 0) continue;
    best = &q;
    by = submitter;
    not_by = waiter;
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
  const auto shutdown = std::chrono::duration<double>(shutdown_seconds_);
  auto failing = [&](const PendingKey& key) {
    return shutdown_seconds_ > 0 && now - key.first_seen >= shutdown;
  };
  auto warned = [&](const PendingKey& key) {
    return check_seconds_ > 0 && now - key.first_seen >= check;
  };
  // The keys this call may report, verdicts first and each kind oldest first, so that the
  // crossings it looks for (kCrossingsPerInspect) go where they matter most: a verdict's message
  // becomes the ranks' error. Most calls have none.
  std::vector<const PendingKey*> reported;
  for (const PendingKey& key : pending) {
    if (!key.missing.empty() && (failing(key) || warned(key))) reported.push_back(&key);
  }
  if (reported.empty()) return verdicts;
  std::stable_sort(reported.begin(), reported.end(), [&](const PendingKey* a, const PendingKey* b) {
    if (failing(*a) != failing(*b)) return failing(*a);
    return a->first_seen < b->first_seen;
  });
  int crossings = kCrossingsPerInspect;
  auto with_crossing = [&](const PendingKey& key) {
    PendingKey p = key;
    if (crossings > 0) {
      --crossings;
      FindCrossing(pending, &p);
    }
    return p;
  };
  for (const PendingKey* key : reported) {
    if (failing(*key)) {
      PendingKey p = with_crossing(*key);
      verdicts.push_back({p, "stalled: " + Describe(p, now) + "; failing it after " +
                                 ShutdownSetting(shutdown_seconds_)});
      continue;
    }
    auto it = last_warned_.find(key->key);
    if (it != last_warned_.end() && now - it->second < check) continue;
    last_warned_[key->key] = now;
    const PendingKey p = with_crossing(*key);
    // With a crossing the description already says which (different orders).
    HVD_LOG(WARNING) << "stall: " << Describe(p, now)
                     << (p.crossing.empty() ? ". A rank is stuck outside hvd or submits tensors "
                                              "in a different order or with different names."
                                            : ".");
  }
  return verdicts;
}

}  // namespace hvd::runtime::stall
