#include "launcherd/job_watch.h"

namespace hvd::launcherd {
namespace {

// Events handed to one WatchJob write loop at a time, so a long backlog streams in pieces.
constexpr size_t kMaxEventsPerCall = 512;

}  // namespace

void JobWatch::Begin(const Job& job, int64_t from_seq, WatchCursor* cursor,
                     std::vector<JobEvent>* events) const {
  cursor->started = true;
  cursor->backlog_end = job.log.end();
  if (from_seq > 0) {
    // Resuming a broken watch: the client saw the history; the current status and the output
    // it missed are enough.
    JobEvent e;
    e.kind = JobEvent::Kind::kStatus;
    e.status = job.status;
    events->push_back(std::move(e));
    cursor->status_sent = job.version;
    cursor->next = job.log.FirstOutputFrom(from_seq);
    cursor->output_only_until = cursor->backlog_end;
  } else {
    // Starting before the retained history makes AddEvents say that some was dropped.
    cursor->next = job.log.begin() > 0 ? job.log.begin() - 1 : 0;
  }
}

void JobWatch::Wait(base::MutexLock& lock, const Job& job, const WatchCursor& cursor,
                    std::chrono::milliseconds wait) {
  // std::map keeps the entry where it is while others come and go.
  Waiters& w = waiting_[job.id()];
  ++w.count;
  w.cv.WaitFor(lock, wait, [&] { return job.log.end() > cursor.next || job.finished || closed_; });
  if (--w.count == 0) waiting_.erase(job.id());
}

void JobWatch::Notify(const std::string& job_id) {
  auto it = waiting_.find(job_id);
  if (it != waiting_.end()) it->second.cv.NotifyAll();
}

void JobWatch::CloseAll() {
  closed_ = true;
  for (auto& [id, w] : waiting_) w.cv.NotifyAll();
}

void JobWatch::AddEvents(Job& job, int64_t from_seq, bool follow, WatchCursor* cursor,
                         std::vector<JobEvent>* events, bool* done) const {
  auto push_status = [&] {
    JobEvent e;
    e.kind = JobEvent::Kind::kStatus;
    e.status = job.status;
    events->push_back(std::move(e));
    cursor->status_sent = job.version;
  };
  if (cursor->next < job.log.begin()) {
    JobEvent e;
    e.kind = JobEvent::Kind::kProgress;
    e.progress = std::string(control::kOutputDroppedNote) + "the launcher keeps the last " +
                 std::to_string(max_output_lines_) + " lines of a job";
    events->push_back(std::move(e));
    cursor->next = job.log.begin();
  }
  while (cursor->next < job.log.end() && events->size() < kMaxEventsPerCall) {
    const int64_t index = cursor->next++;
    const JobLog::Entry& entry = job.log.at(index);
    if (entry.kind == JobLog::Entry::Kind::kOutput) {
      if (entry.output.seq < from_seq) continue;
      const int64_t renumbered_at = job.log.renumbered_at();
      if (renumbered_at >= 0 && entry.output.seq >= renumbered_at && !cursor->renumbering_said) {
        JobEvent note;
        note.kind = JobEvent::Kind::kProgress;
        note.progress = std::string(control::kOutputRenumberedNote) +
                        "the launcher restarted; its output from then on is numbered from " +
                        std::to_string(renumbered_at) +
                        " (lines it held before the restart are no longer kept)";
        events->push_back(std::move(note));
        cursor->renumbering_said = true;
      }
      JobEvent e;
      e.kind = JobEvent::Kind::kOutput;
      e.output = entry.output;
      events->push_back(std::move(e));
    } else if (index < cursor->output_only_until) {
      continue;
    } else if (entry.kind == JobLog::Entry::Kind::kProgress) {
      JobEvent e;
      e.kind = JobEvent::Kind::kProgress;
      e.progress = entry.progress;
      events->push_back(std::move(e));
    } else if (cursor->status_sent < entry.version) {
      JobEvent e;
      e.kind = JobEvent::Kind::kStatus;
      e.status = entry.status;
      events->push_back(std::move(e));
      cursor->status_sent = entry.version;
    }
  }
  job.log.NoteRead(cursor->next);
  if (!events->empty()) cursor->last_was_status = events->back().kind == JobEvent::Kind::kStatus;
  const bool caught_up = cursor->next >= job.log.end();
  const bool backlog_sent = cursor->next >= cursor->backlog_end;
  if ((!follow && backlog_sent) || (caught_up && (job.finished || closed_))) {
    // The stream ends with the newest status (rank changes bump the version without an entry).
    if (cursor->status_sent != job.version || !cursor->last_was_status) push_status();
    *done = true;
  }
}

}  // namespace hvd::launcherd
