// The stall reporter: tells whoever supervises the job (hvd-launcherd) when this rank sees no
// progress, by writing the rendezvous key "stall/<rank>" under the job's attempt scope. The
// launcher shows the reports in the job's record and `hvdrun status`, finds the culprit, and with
// --stall-timeout fails the job (launcherd/stall_reports.h documents the value format).
//
// Two kinds of report, both after HVD_STALL_CHECK_TIME_SECONDS:
//   inspector - a coordinator on this rank (the global set's on rank 0, a process set's on its
//               first member): a tensor some ranks submitted and others did not
//               ("rank 2 on host-c has not submitted allreduce 'fc1.grad' for 61 s (ranks 0, 1
//               have)"). The blamed ranks' background threads still run: they are stuck in user
//               code, or submit under other names.
//   wait      - any rank whose background thread is blocked in one transport wait on the same
//               peers for that long ("rank 0 on host-a has waited 12 s for rank 3 on host-b").
//               A SIGSTOPped rank reports nothing itself; the launcher finds it as the end of
//               the wait chain.
// A report is written when it appears, again every check interval while it lasts (its age
// grows), and cleared (an empty value) when progress resumes. Writing never blocks the engine:
// the reporter has its own thread, and a store that fails (the launcher restarting) is reopened
// later, not retried in a loop.
//
// It also records "abort/<rank>" when this rank's operations fail because of a peer (a broken
// link, a shutdown another rank started), before the failure reaches user code: the launcher then
// knows this rank's exit is a consequence, and names the rank that failed first as the cause.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "rendezvous/store.h"
#include "stall/stall_inspector.h"

namespace hvd::runtime::stall {

class StallReporter {
 public:
  struct Options {
    int rank = 0;
    std::vector<std::string> hosts;  // hosts[r]: rank r's host name
    double check_seconds = 60;       // <= 0: the reporter reports nothing
    std::string url;                 // HVD_RENDEZVOUS, to reopen the store after a failure
    std::string scope;               // "job/<id>/attempt/<n>"
    // An elastic job (runtime/core/elastic.h): worker_ids[r] is rank r's worker id. The launcher
    // knows workers by id, so the keys and the blamed ranks are ids, and messages name both.
    std::vector<int> worker_ids;
  };

  // `store` (the rank's connection to the rendezvous, not owned) must outlive the reporter; it is
  // used until it fails, then a fresh one is opened from `url`.
  StallReporter(Options options, rendezvous::Store* store);
  // Clears a report still standing (best effort; not a verdict's, which says why this rank
  // fails), and stops the thread.
  ~StallReporter();
  StallReporter(const StallReporter&) = delete;
  StallReporter& operator=(const StallReporter&) = delete;

  // A rank with a coordinator: the oldest stalled key they know of, or none (`stalled` false).
  void SetInspectorReport(bool stalled, const PendingKey& oldest);

  // A coordinator on this rank failed `key` after HVD_STALL_SHUTDOWN_TIME_SECONDS (`setting`
  // names it). The key is forgotten, so the inspector report would clear and tell the launcher
  // the job moves again; instead this report stands, naming the ranks that never submitted it,
  // until another stall replaces it or the set moves again (Progress).
  void ReportVerdict(const PendingKey& key, const std::string& setting);
  // This rank fails a key as stalled (`message`, the verdict): ReportPeerFailure's record, but
  // withdrawn by Progress (a rank that catches the error and goes on is no consequence of it).
  void ReportStallFailure(const std::string& message);
  // The set that failed a stalled key on this rank completed an operation in a later cycle: the
  // verdict's report and the stall failure's record are withdrawn.
  void Progress();

  // The background thread starts and ends a blocking wait on `peers`. Cheap: called around every
  // transport wait.
  void WaitBegin(const std::vector<int>& peers);
  void WaitEnd();

  // This rank is about to fail its operations because of a peer; `message` says what happened.
  // Waits (up to half a second) until the record is written, so it reaches the launcher before
  // the rank's exit does.
  void ReportPeerFailure(const std::string& message);

  // The value that describes the stall now ("" when none); for tests.
  std::string Current();

 private:
  // This rank's key: its worker id in an elastic job, else its rank.
  int KeyId() const {
    return options_.worker_ids.empty() ? options_.rank : options_.worker_ids[options_.rank];
  }
  using Clock = std::chrono::steady_clock;
  struct Report {
    char kind = 0;         // 0: none, 'S': inspector, 'W': wait
    bool verdict = false;  // 'S' for a key failed after the shutdown time (ReportVerdict)
    int64_t age_s = 0;
    std::vector<int> blamed;
    std::string message;
    std::string Value() const;  // the stored form; "" for none
  };
  void Loop();
  Report Compose(Clock::time_point now) HVD_REQUIRES(mu_);
  std::string InspectorMessage(const PendingKey& p, int64_t age_s) const;
  // ReportPeerFailure's record; `stall`: withdrawn by Progress.
  void RecordFailure(const std::string& message, bool stall);
  void Write(const std::string& key, const std::string& value);

  const Options options_;
  rendezvous::Store* const shared_store_;
  std::unique_ptr<rendezvous::Store> own_base_;   // reopened after the shared one failed
  std::unique_ptr<rendezvous::Store> own_store_;  // its attempt scope
  Clock::time_point reopen_after_;

  base::Mutex mu_;
  base::CondVar cv_;
  bool stop_ HVD_GUARDED_BY(mu_) = false;
  bool inspector_stalled_ HVD_GUARDED_BY(mu_) = false;
  PendingKey inspector_ HVD_GUARDED_BY(mu_);
  bool verdict_standing_ HVD_GUARDED_BY(mu_) = false;
  PendingKey verdict_ HVD_GUARDED_BY(mu_);
  std::string verdict_setting_ HVD_GUARDED_BY(mu_);
  Clock::time_point verdict_at_ HVD_GUARDED_BY(mu_);
  Clock::time_point wait_since_ HVD_GUARDED_BY(mu_);
  std::vector<int> wait_peers_ HVD_GUARDED_BY(mu_);  // empty: not waiting
  Report written_ HVD_GUARDED_BY(mu_);               // the report last written
  std::string peer_failure_ HVD_GUARDED_BY(mu_);     // to write as abort/<rank>; "" when none
  bool peer_failure_written_ HVD_GUARDED_BY(mu_) = false;
  bool peer_failure_is_stall_ HVD_GUARDED_BY(mu_) = false;  // ReportStallFailure's
  bool withdraw_pending_ HVD_GUARDED_BY(mu_) = false;       // write "" to abort/<rank>
  Clock::time_point written_at_ HVD_GUARDED_BY(mu_);
  // Loop's thread only.
  std::unique_ptr<rendezvous::Store> scoped_shared_;
  bool shared_failed_ = false;
  std::thread thread_;
};

}  // namespace hvd::runtime::stall
