#include "cli/follow.h"

#include <algorithm>
#include <thread>

#include "base/clock.h"
#include "base/mutex.h"
#include "cli/job_format.h"
#include "cli/stall_news.h"
#include "control/job_state.h"

namespace hvd::cli {
namespace {

using Clock = std::chrono::steady_clock;

// A job still waiting for slots after this long gets its reason printed: long enough that the
// normal moment of PENDING before placement stays quiet, short enough that a job which cannot
// be placed never looks like a silent hang.
constexpr std::chrono::milliseconds kPendingQuiet{2000};
// Lost output is said at most this often while it goes on (and once more at the end).
constexpr std::chrono::milliseconds kDroppedRepeat{5000};
// Then again this often while it waits, with how long it has.
constexpr std::chrono::milliseconds kPendingRepeat{60000};

// Errors a retry cannot fix: the job or the token is wrong.
bool Permanent(const Status& s) {
  return s.code() == StatusCode::kNotFound || s.code() == StatusCode::kInvalidArgument ||
         s.code() == StatusCode::kFailedPrecondition || s.code() == StatusCode::kUnimplemented;
}

class Follower {
 public:
  Follower(Client* client, const std::string& job_id, OutputSink* sink, const FollowOptions& o,
           FollowResult* result)
      : client_(client), job_id_(job_id), sink_(sink), o_(o), result_(result) {
    next_seq_ = o.from_seq;
  }

  Status Run() {
    std::thread reporter([this] { ReportPending(); });
    Status s = Stream();
    SayDroppedRest();
    {
      base::MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.NotifyAll();
    reporter.join();
    return s;
  }

 private:
  Status Stream() {
    std::chrono::milliseconds backoff(100);
    Clock::time_point broken_since{};
    while (true) {
      bool got_event = false;
      Status s =
          client_->Watch(job_id_, next_seq_, o_.follow, o_.attach, [&](const control::JobEvent& e) {
            got_event = true;
            OnEvent(e);
          });
      // Cancelled by us (a signal); a launcher that cancels the stream while stopping is retried.
      if (s.code() == StatusCode::kCancelled && client_->interrupted()) return s;
      if (s.ok() && (result_->ended || !o_.follow)) break;
      if (s.ok()) {
        // Closed before the final state (a launcher shutting down?): ask, then resume.
        control::JobStatus st;
        s = client_->GetJob(job_id_, &st);
        if (s.ok() && control::IsTerminal(st.state)) {
          OnStatus(st);
          break;
        }
        if (s.ok()) s = Unavailable("launcher at " + client_->address() + " ended the stream");
      }
      if (Permanent(s)) return s;
      if (got_event || broken_since == Clock::time_point{}) {
        broken_since = Clock::now();
        backoff = std::chrono::milliseconds(100);
        sink_->Message("hvdrun: lost the event stream of job " + job_id_ + " (" + s.message() +
                       "); reconnecting for up to " +
                       std::to_string(o_.reconnect_for.count() / 1000) + " s");
      }
      if (Clock::now() - broken_since > o_.reconnect_for) {
        return Unavailable(s.message() + "; gave up after " +
                           std::to_string(o_.reconnect_for.count() / 1000) +
                           " s. The job may still be running: hvdrun status " + job_id_);
      }
      std::this_thread::sleep_for(backoff);
      // Back within the client lease (a second or two) once the launcher is: beyond it an
      // attached job is cancelled for want of its client.
      backoff = std::min(backoff * 2, std::chrono::milliseconds(250));
    }
    if (result_->ended) WaitForRanksGone();
    return Status::OK();
  }

  void OnEvent(const control::JobEvent& e) {
    switch (e.kind) {
      case control::JobEvent::Kind::kOutput:
        // Output lines are numbered from 0 without gaps: a gap is lines this watcher never got,
        // unless the launcher said it renumbered them (after its restart: not lines dropped).
        if (e.output.seq > next_seq_ && !renumbered_) SayDropped(e.output.seq - next_seq_);
        renumbered_ = false;
        sink_->Write(e.output);
        next_seq_ = std::max(next_seq_, e.output.seq + 1);
        break;
      case control::JobEvent::Kind::kStatus:
        OnStatus(e.status);
        break;
      case control::JobEvent::Kind::kProgress:
        if (e.progress.rfind(control::kOutputRenumberedNote, 0) == 0) {
          renumbered_ = true;
          if (o_.verbose) sink_->Message("hvdrun: " + e.progress);
        } else if (e.progress.rfind(control::kOutputDroppedNote, 0) == 0) {
          drop_reason_ =
              e.progress.substr(control::kOutputDroppedNote.size());  // said with the count
        } else if (e.progress.rfind(control::kStacksAskedNote, 0) == 0) {
          // As the stall it follows: news whether or not --verbose asked for progress.
          sink_->Message("hvdrun: " + e.progress.substr(control::kStacksAskedNote.size()));
        } else if (o_.verbose) {
          sink_->Message("hvdrun: " + e.progress);
        }
        break;
    }
  }

  // Lost output is said whether or not --verbose asked for progress: a log with lines missing
  // must not read as complete. The first loss at once, then at most every kDroppedRepeat, and
  // what was not said yet when the stream ends (SayDroppedRest).
  void SayDropped(int64_t lines) {
    dropped_total_ += lines;
    dropped_unsaid_ += lines;
    const auto now = Clock::now();
    if (dropped_said_at_ != Clock::time_point{} && now - dropped_said_at_ < kDroppedRepeat) return;
    dropped_said_at_ = now;
    SayDroppedRest();
  }
  void SayDroppedRest() {
    if (dropped_unsaid_ == 0) return;
    std::string text = "hvdrun: " + std::to_string(dropped_unsaid_) + " line" +
                       (dropped_unsaid_ == 1 ? "" : "s") + " of job " + job_id_ +
                       "'s output dropped before reaching this client";
    if (dropped_total_ != dropped_unsaid_)
      text += " (" + std::to_string(dropped_total_) + " in all)";
    sink_->Message(
        text + ": " +
        (drop_reason_.empty() ? std::string("the launcher no longer had them") : drop_reason_));
    dropped_unsaid_ = 0;
  }

  // The events after the newest one already said (the record keeps the newest 100 only).
  void SayMembershipEvents(const std::vector<control::MembershipEvent>& events) {
    size_t from = 0;
    for (size_t i = events.size(); i-- > 0;) {
      const control::MembershipEvent& e = events[i];
      if (e.time_ms < said_event_ms_ || (e.time_ms == said_event_ms_ && e.what == said_event_)) {
        from = i + 1;
        break;
      }
    }
    for (size_t i = from; i < events.size(); ++i) {
      // Generation 0 is the job's start, which needs no line of its own; with --verbose every
      // event was said as the progress line the launcher logged with it.
      if (!o_.verbose && events[i].what.rfind("generation 0:", 0) != 0) {
        sink_->Message("hvdrun: job " + job_id_ + ": " + events[i].what);
      }
      said_event_ms_ = events[i].time_ms;
      said_event_ = events[i].what;
    }
  }

  void OnStatus(const control::JobStatus& st) {
    using control::JobState;
    const bool changed = st.state != result_->status.state;
    const bool reason_changed = st.reason != result_->status.reason;
    // A stall is news whether or not --verbose asked for progress: it is what a silent hang
    // looks like from outside.
    if (std::string news = StallNews(job_id_, result_->status, st); !news.empty()) {
      sink_->Message(news);
    }
    // An elastic job's membership changes too: a worker left, the job goes on smaller.
    SayMembershipEvents(st.elastic.events);
    // Restarts too: the user sees why the job starts over.
    if (changed && st.state == JobState::kRestarting) {
      sink_->Message("hvdrun: job " + job_id_ + " " + st.reason);
    }
    // The final state is said once: a failed or cancelled job's by the caller's failure summary
    // (or its signal message), so only success is said here.
    const bool says_end = st.state == JobState::kSucceeded || !control::IsTerminal(st.state);
    if (o_.verbose && says_end && (changed || (st.state == JobState::kPending && reason_changed))) {
      sink_->Message("hvdrun: job " + job_id_ + " " + JobStateText(st.state) +
                     (st.reason.empty() ? "" : ": " + st.reason));
    }
    {
      base::MutexLock lock(&mu_);
      if (st.state != JobState::kPending) {
        pending_reason_.clear();
      } else {
        if (changed || pending_reason_.empty()) pending_since_ = Clock::now();
        pending_reason_ = st.reason;
        const int64_t since = pending_status_.queued_since_ms;
        pending_status_ = st;
        // A launcher too old to say since when: since hvdrun first saw it wait.
        if (st.queued_since_ms == 0) {
          pending_status_.queued_since_ms = changed || since == 0 ? base::WallMs() : since;
        }
      }
    }
    result_->status = st;
    if (control::IsTerminal(st.state)) result_->ended = true;
  }

  // Says why a job waits, and how long it has, once it has waited kPendingQuiet, again when the
  // reason changes, and every kPendingRepeat while it goes on (with --verbose too: a state
  // change line does not say how long).
  void ReportPending() {
    base::MutexLock lock(&mu_);
    std::string printed;
    Clock::time_point printed_at;
    while (!stop_) {
      cv_.WaitFor(lock, std::chrono::milliseconds(200));
      if (stop_ || pending_reason_.empty()) continue;
      const auto now = Clock::now();
      if (now - pending_since_ < kPendingQuiet) continue;
      if (pending_reason_ == printed && now - printed_at < kPendingRepeat) continue;
      const bool again = pending_reason_ == printed;
      printed = pending_reason_;
      printed_at = now;
      sink_->Message("hvdrun: job " + job_id_ + (again ? " is still waiting " : " is waiting ") +
                     WaitingText(pending_status_, base::WallMs()) + ": " + printed);
    }
  }

  // The final state can arrive while the teardown is still killing ranks; the job is only over
  // for hvdrun when none is left.
  void WaitForRanksGone() {
    const auto deadline = Clock::now() + o_.ranks_gone_wait;
    while (!AllRanksGone(result_->status)) {
      if (Clock::now() >= deadline || client_->interrupted()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      control::JobStatus st;
      if (client_->GetJob(job_id_, &st).ok()) result_->status = st;
    }
    result_->ranks_gone = true;
  }

  Client* client_;
  const std::string job_id_;
  int64_t said_event_ms_ = -1;  // the newest membership event said (SayMembershipEvents)
  std::string said_event_;
  OutputSink* sink_;
  const FollowOptions o_;
  FollowResult* result_;
  int64_t next_seq_ = 0;
  // The launcher's reason for the lines it could no longer send (its "output dropped: ..." note).
  std::string drop_reason_;
  bool renumbered_ = false;     // the next line's seq may jump: the launcher restarted
  int64_t dropped_total_ = 0;   // output lines this watcher never got
  int64_t dropped_unsaid_ = 0;  // of them, not said yet
  Clock::time_point dropped_said_at_{};

  base::Mutex mu_;  // guards the pending state shared with the reporter thread
  base::CondVar cv_;
  bool stop_ HVD_GUARDED_BY(mu_) = false;
  // Empty: not pending (or no reason given).
  std::string pending_reason_ HVD_GUARDED_BY(mu_);
  // The latest PENDING status (how long, --queue-timeout).
  control::JobStatus pending_status_ HVD_GUARDED_BY(mu_);
  Clock::time_point pending_since_ HVD_GUARDED_BY(mu_);
};

}  // namespace

bool AllRanksGone(const control::JobStatus& status) {
  using control::RankState;
  for (const control::RankStatus& r : status.ranks) {
    // A rank never sent to its agent (PENDING) has no process to wait for.
    const bool never_started = r.state == RankState::kPending || r.state == RankState::kUnspecified;
    if (!never_started && !control::RankEnded(r.state)) return false;
  }
  return true;
}

Status FollowJob(Client* client, const std::string& job_id, OutputSink* sink,
                 const FollowOptions& options, FollowResult* result) {
  *result = FollowResult();
  return Follower(client, job_id, sink, options, result).Run();
}

}  // namespace hvd::cli
