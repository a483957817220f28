// What the ranks of a job report about stalls (runtime/stall/stall_reporter.h writes them to the
// rendezvous store under job/<id>/attempt/<n>/stall/<rank>), and the one line the job's record
// shows for them. Pure.
//
// Vocabulary:
//   inspector report - from a coordinator (rank 0's, or a process set's first member): some
//                      ranks submitted a tensor, the blamed ones did not, for age seconds. Their
//                      own background threads still run, so they do not report: they are stuck in
//                      user code.
//   wait report      - from any rank whose background thread has waited age seconds on the
//                      blamed peers (a collective or negotiation that does not move).
//   culprit          - a blamed rank that reports nothing itself. A SIGSTOPped rank reports nothing
//                      and is waited on by others, so it is found as the end of the wait chain.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace hvd::launcherd {

struct StallReport {
  enum class Kind { kInspector, kWait };
  Kind kind = Kind::kWait;
  double age_s = 0;
  std::vector<int> blamed;
  std::string message;
};

// The stored value: "<S|W>\n<age seconds>\n<blamed ranks, comma-separated>\n<message>".
// False when malformed. (An empty value means the rank's stall cleared; the caller handles it.)
bool ParseStallReport(const std::string& value, StallReport* out);
std::string FormatStallReport(const StallReport& report);

// The culprits: blamed ranks that report no stall themselves, where the chains of waits end.
std::set<int> StallCulprits(const std::map<int, StallReport>& reports);

// One line naming the culprits, or the oldest report when the waits form no chain; "" when there
// are no reports. `host_of(rank)` names a rank's host.
std::string SummarizeStalls(const std::map<int, StallReport>& reports,
                            const std::function<std::string(int)>& host_of);

// The longest age among the reports (seconds).
double OldestStall(const std::map<int, StallReport>& reports);

}  // namespace hvd::launcherd
