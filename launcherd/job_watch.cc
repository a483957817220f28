// JobManager: WatchJob's event source. A watch walks the job's log (job_log.h) with a cursor of its
// own, so any number of watchers follow one job without the job tracking them.
#include "launcherd/job_manager.h"

namespace hvd::launcherd {
namespace {

// Events handed to one WatchJob write loop at a time, so a long backlog streams in pieces.
constexpr size_t kMaxEventsPerCall = 512;

}  // namespace

Status JobManager::NextEvents(const std::string& id, int64_t from_seq, bool follow,
                              std::chrono::milliseconds wait, WatchCursor* cursor,
                              std::vector<JobEvent>* events, bool* done) {
  std::unique_lock<std::mutex> lock(mu_);
  JobPtr job = FindLocked(id);  // held: the job may be pruned from the table while we wait
  if (!job) return NotFound("no job '" + id + "' on this launcher; list jobs with: hvdrun list");
  *done = false;
  if (!cursor->started) {
    cursor->started = true;
    cursor->backlog_end = job->log.end();
    if (from_seq > 0) {
      // Resuming a broken watch: the client saw the history; the current status and the output
      // it missed are enough.
      JobEvent e;
      e.kind = JobEvent::Kind::kStatus;
      e.status = job->status;
      events->push_back(std::move(e));
      cursor->status_sent = job->version;
      cursor->next = job->log.FirstOutputFrom(from_seq);
      cursor->output_only_until = cursor->backlog_end;
    } else {
      // Starting before the retained history makes AddEventsLocked say that some was dropped.
      cursor->next = job->log.begin() > 0 ? job->log.begin() - 1 : 0;
    }
  } else if (follow) {
    job->cv.wait_for(lock, wait, [&] {
      return job->log.end() > cursor->next || job->finished || watches_closed_;
    });
  }
  AddEventsLocked(*job, from_seq, follow, cursor, events, done);
  return Status::OK();
}

void JobManager::AddEventsLocked(Job& job, int64_t from_seq, bool follow, WatchCursor* cursor,
                                 std::vector<JobEvent>* events, bool* done) {
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
    e.progress = "output dropped: the launcher keeps the last " +
                 std::to_string(options_.max_output_lines) + " lines of a job";
    events->push_back(std::move(e));
    cursor->next = job.log.begin();
  }
  while (cursor->next < job.log.end() && events->size() < kMaxEventsPerCall) {
    const int64_t index = cursor->next++;
    const JobLog::Entry& entry = job.log.at(index);
    if (entry.kind == JobLog::Entry::Kind::kOutput) {
      if (entry.output.seq < from_seq) continue;
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
  if ((!follow && backlog_sent) || (caught_up && (job.finished || watches_closed_))) {
    // The stream ends with the newest status (rank changes bump the version without an entry).
    if (cursor->status_sent != job.version || !cursor->last_was_status) push_status();
    *done = true;
  }
}

}  // namespace hvd::launcherd
