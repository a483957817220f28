#include "stall/stall_reporter.h"

#include <algorithm>

#include "base/logging.h"
#include "base/rendezvous_keys.h"

namespace hvd::runtime::stall {
namespace {

// How often the reporter looks; a report appears at most this late after the check time.
constexpr auto kMaxPoll = std::chrono::milliseconds(1000);
// After a store failure, how long before a fresh connection is tried.
constexpr auto kReopenAfter = std::chrono::seconds(5);

std::string Ranks(const std::vector<int>& ranks, const std::vector<std::string>& hosts,
                  const std::vector<int>& ids) {
  auto host = [&](int r) {
    return r >= 0 && r < static_cast<int>(hosts.size()) ? hosts[r] : std::string("?");
  };
  auto id = [&](int r) {
    return r >= 0 && r < static_cast<int>(ids.size()) ? std::to_string(ids[r]) : std::string("?");
  };
  if (!ids.empty()) {  // elastic: "worker 3 (rank 2) on host-b"
    std::string out;
    for (size_t i = 0; i < ranks.size(); ++i) {
      out += (i > 0 ? ", " : "") + std::string("worker ") + id(ranks[i]) + " (rank " +
             std::to_string(ranks[i]) + ") on " + host(ranks[i]);
    }
    return out;
  }
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]) + " on " + host(ranks[0]);
  std::string out = "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]) + " (" + host(ranks[i]) + ")";
  }
  return out;
}

// Ranks as the launcher knows them: worker ids in an elastic job.
std::vector<int> ToIds(const std::vector<int>& ranks, const std::vector<int>& ids) {
  if (ids.empty()) return ranks;
  std::vector<int> out;
  for (int r : ranks) out.push_back(r >= 0 && r < static_cast<int>(ids.size()) ? ids[r] : r);
  return out;
}

std::string Csv(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace

StallReporter::StallReporter(Options options, rendezvous::Store* store)
    : options_(std::move(options)), shared_store_(store) {
  scoped_shared_ = rendezvous::NewPrefixStore(options_.scope, shared_store_);
  thread_ = std::thread(&StallReporter::Loop, this);
}

StallReporter::~StallReporter() {
  {
    base::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void StallReporter::SetInspectorReport(bool stalled, const PendingKey& oldest) {
  base::MutexLock lock(&mu_);
  inspector_stalled_ = stalled;
  if (stalled) {
    inspector_ = oldest;
    verdict_standing_ = false;  // the new stall is the news
  }
}

void StallReporter::ReportVerdict(const PendingKey& key, const std::string& setting) {
  if (key.missing.empty()) return;
  base::MutexLock lock(&mu_);
  verdict_ = key;
  verdict_setting_ = setting;
  verdict_at_ = Clock::now();
  // The inspector's report (set at the engine's last report tick) is of the key just failed; a
  // stall still pending is set again at the next tick, replacing this one.
  inspector_stalled_ = false;
  // Written with the abort record the failing operation reports next (ReportPeerFailure).
  verdict_standing_ = true;
}

void StallReporter::ReportStallFailure(const std::string& message) {
  RecordFailure(message, /*stall=*/true);
}

void StallReporter::Progress() {
  base::MutexLock lock(&mu_);
  verdict_standing_ = false;
  if (peer_failure_is_stall_) {  // the record goes; a later peer failure is news again
    peer_failure_.clear();
    peer_failure_is_stall_ = false;
    peer_failure_written_ = false;
    withdraw_pending_ = true;
    cv_.NotifyAll();
  }
}

void StallReporter::WaitBegin(const std::vector<int>& peers) {
  base::MutexLock lock(&mu_);
  // The same peers again: the wait goes on (a loop of short waits counts as one).
  if (peers == wait_peers_) return;
  wait_peers_ = peers;
  wait_since_ = Clock::now();
}

void StallReporter::WaitEnd() {
  // Progress: a later wait, even on the same peers, starts a new clock.
  base::MutexLock lock(&mu_);
  wait_peers_.clear();
}

std::string StallReporter::Report::Value() const {
  if (kind == 0) return "";
  return std::string(1, kind) + "\n" + std::to_string(age_s) + "\n" + Csv(blamed) + "\n" + message;
}

std::string StallReporter::Current() {
  base::MutexLock lock(&mu_);
  return Compose(Clock::now()).Value();
}

void StallReporter::ReportPeerFailure(const std::string& message) {
  RecordFailure(message, /*stall=*/false);
}

void StallReporter::RecordFailure(const std::string& message, bool stall) {
  base::MutexLock lock(&mu_);
  if (!peer_failure_.empty()) return;  // the first failure says it
  peer_failure_ = message.empty() ? "a peer failed" : message;
  peer_failure_is_stall_ = stall;
  cv_.NotifyAll();
  cv_.WaitFor(lock, std::chrono::milliseconds(500),
              [&]() HVD_REQUIRES(mu_) { return peer_failure_written_; });
}

std::string StallReporter::InspectorMessage(const PendingKey& p, int64_t age_s) const {
  const size_t n = p.submitted.size();
  return Ranks(p.missing, options_.hosts, options_.worker_ids) +
         (p.missing.size() == 1 ? " has" : " have") + " not submitted " + p.op + " '" + p.key +
         "' for " + std::to_string(age_s) + " s (" + (n == 1 ? "rank " : "ranks ") +
         Csv(p.submitted) + (n == 1 ? " has" : " have") + ")" + CrossingText(p);
}

StallReporter::Report StallReporter::Compose(Clock::time_point now) {
  Report r;
  if (options_.check_seconds > 0 && inspector_stalled_ && !inspector_.missing.empty()) {
    r.kind = 'S';
    r.age_s = std::chrono::duration_cast<std::chrono::seconds>(now - inspector_.first_seen).count();
    r.blamed = ToIds(inspector_.missing, options_.worker_ids);
    r.message = InspectorMessage(inspector_, r.age_s);
    return r;
  }
  if (verdict_standing_) {  // also with stall checks off
    r.kind = 'S';
    r.verdict = true;
    r.age_s = std::chrono::duration_cast<std::chrono::seconds>(verdict_at_ - verdict_.first_seen)
                  .count();  // as it stood: the missing ranks may have submitted it since
    r.blamed = ToIds(verdict_.missing, options_.worker_ids);
    r.message = InspectorMessage(verdict_, r.age_s) + "; the operation failed on " +
                (verdict_.submitted.size() == 1 ? "that rank" : "those ranks") + " after " +
                verdict_setting_;
    return r;
  }
  if (options_.check_seconds <= 0) return r;
  if (!wait_peers_.empty() &&
      now - wait_since_ >= std::chrono::duration<double>(options_.check_seconds)) {
    r.kind = 'W';
    r.age_s = std::chrono::duration_cast<std::chrono::seconds>(now - wait_since_).count();
    r.blamed = ToIds(wait_peers_, options_.worker_ids);
    r.message = Ranks({options_.rank}, options_.hosts, options_.worker_ids) + " has waited " +
                std::to_string(r.age_s) + " s for " +
                Ranks(wait_peers_, options_.hosts, options_.worker_ids);
  }
  return r;
}

void StallReporter::Loop() {
  const double check_s = options_.check_seconds > 0 ? options_.check_seconds : 4;
  const auto poll = std::min<std::chrono::milliseconds>(
      kMaxPoll, std::chrono::milliseconds(static_cast<int64_t>(check_s * 250) + 1));
  const auto check = std::chrono::duration<double>(check_s);
  // What an earlier session of this rank left in the attempt (a verdict's report, kept through
  // its shutdown; a peer failure it recovered from, as hvd.elastic.run's reset does) is over:
  // it would otherwise stand for the rest of the attempt.
  Write(base::RankKey(base::RankKeyKind::kStall, KeyId()), "");
  Write(base::RankKey(base::RankKeyKind::kAbort, KeyId()), "");
  base::MutexLock lock(&mu_);
  while (true) {
    cv_.WaitFor(lock, poll, [&]() HVD_REQUIRES(mu_) {
      return stop_ || withdraw_pending_ || (!peer_failure_.empty() && !peer_failure_written_);
    });
    if (withdraw_pending_) {
      withdraw_pending_ = false;
      lock.Unlock();
      Write(base::RankKey(base::RankKeyKind::kAbort, KeyId()), "");
      lock.Lock();
    }
    if (!peer_failure_.empty() && !peer_failure_written_) {
      const std::string message = peer_failure_;
      lock.Unlock();
      Write(base::RankKey(base::RankKeyKind::kAbort, KeyId()), message);
      lock.Lock();
      peer_failure_written_ = true;
      cv_.NotifyAll();
    }
    // At shutdown a report still standing is cleared, except a verdict's: the rank exits
    // because of it, and the launcher names the stalled rank as the job's cause from it.
    const bool keep = stop_ && verdict_standing_;
    const auto now = Clock::now();
    Report r = stop_ && !keep ? Report() : Compose(now);
    // A new kind or new blamed ranks are news at once; a grown age once per check interval.
    const bool changed =
        r.kind != written_.kind || r.verdict != written_.verdict || r.blamed != written_.blamed;
    if (changed || (r.kind != 0 && now - written_at_ >= check)) {
      written_ = r;
      written_at_ = now;
      lock.Unlock();
      Write(base::RankKey(base::RankKeyKind::kStall, KeyId()), r.Value());
      lock.Lock();
    }
    if (stop_) return;
  }
}

void StallReporter::Write(const std::string& key, const std::string& value) {
  rendezvous::Store* store = own_store_ ? own_store_.get() : scoped_shared_.get();
  if (own_store_ == nullptr && shared_failed_ && !options_.url.empty() &&
      Clock::now() >= reopen_after_) {
    // The launcher may have restarted: the old connection is gone for good.
    Status s = rendezvous::OpenStore(options_.url, &own_base_);
    if (s.ok()) {
      own_store_ = rendezvous::NewPrefixStore(options_.scope, own_base_.get());
      store = own_store_.get();
    } else {
      reopen_after_ = Clock::now() + kReopenAfter;
    }
  }
  if (shared_failed_ && own_store_ == nullptr) return;
  Status s = store->Set(key, value);
  if (s.ok()) return;
  if (!shared_failed_) {
    HVD_LOG(WARNING) << "cannot report to the launcher (" << s.message()
                     << "); will retry on a new connection";
  }
  shared_failed_ = true;
  own_store_.reset();
  own_base_.reset();
  reopen_after_ = Clock::now() + kReopenAfter;
}

}  // namespace hvd::runtime::stall
