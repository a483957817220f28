// Timeline implementation: callers enqueue small event records under a mutex (stamping the time
// there, so queue order is time order); one writer thread formats them as Chrome trace events and
// appends them to the file. All per-tensor state (row ids, which phase is open) lives on the writer
// thread, so the hot path never formats JSON or touches the disk.
//
// Recording can start and stop while the engine runs. Three layers keep that race-free:
//   - Timeline::recording_ / mark_cycles_ (atomics) only let the engine skip work cheaply while
//     stopped; they never decide alone whether an event is written;
//   - mu_ guards the queue and `accepting_`, which decides: an event that passed the atomic check
//     just as Stop() ran is dropped under the lock, so nothing lands after the closing bracket;
//   - control_mu_ serializes Start()/Stop()/Close(), which own the file and the writer thread.
// The per-recording writer state (file, rows) is handed between the Start()/Stop() thread and the
// writer thread by thread creation and join, so it needs no lock.
#include "timeline/timeline.h"

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/errno_text.h"
#include "base/logging.h"
#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "timeline/timeline_json.h"

namespace hvd::runtime::timeline {
namespace {

using base::ErrnoText;
using Clock = std::chrono::steady_clock;

// The writer wakes at least this often, so the file trails the run by at most this much; callers
// only signal it when a large batch has built up (signalling on every event would cost a futex
// wake per call).
constexpr auto kFlushInterval = std::chrono::milliseconds(100);
constexpr size_t kWakeBatch = 4096;

// What the writer knows about one tensor's row.
struct Row {
  int pid = 0;
  bool negotiating = false;
  bool active = false;  // an ActivityStart without its end yet
};

}  // namespace

TimelineSetting ParseTimelineSetting(std::string_view value) {
  TimelineSetting s;
  if (value == "DYNAMIC") {
    s.dynamic = true;
  } else {
    s.path = std::string(value);
  }
  return s;
}

class Timeline::Impl {
 public:
  Impl(bool writes_file, std::atomic<bool>* recording, std::atomic<bool>* mark_cycles)
      : writes_file_(writes_file), recording_(recording), mark_cycles_(mark_cycles) {}
  ~Impl() { Close(); }

  Status Start(const std::string& path, bool mark_cycles) {
    base::MutexLock control(&control_mu_);
    if (active_) {
      return FailedPrecondition("the timeline is already being written to '" + path_ +
                                "'; call stop_timeline() first");
    }
    if (path.empty()) return InvalidArgument("timeline: the file path is empty");
    if (!writes_file_) {
      path_ = path;  // for the error above, which every rank then gives alike
      active_ = true;
      return Status::OK();
    }
    // Close-on-exec: a child process (a launcher, a data loader) must not keep the trace open.
    std::FILE* f = std::fopen(path.c_str(), "we");
    if (f == nullptr) {
      const int err = errno;
      return InvalidArgument("timeline: cannot open '" + path + "' for writing: " + ErrnoText(err));
    }
    // Every recording is a file of its own: rows, pids and the marker row start afresh, so a
    // tensor whose phase began before this Start() gets no "E" here (its row has nothing open).
    file_ = f;
    path_ = path;
    rows_.clear();
    next_pid_ = 1;
    marker_row_named_ = false;
    first_event_ = true;
    write_failed_ = false;
    Write("[\n");
    {
      base::MutexLock lock(&mu_);
      queue_.clear();
      closing_ = false;
      start_ = Clock::now();  // timestamps count from the start of this recording
    }
    try {
      writer_ = std::thread([this] { WriterLoop(); });
    } catch (const std::system_error& e) {
      std::fclose(file_);
      file_ = nullptr;
      return Unavailable("timeline: cannot start the thread writing '" + path + "': " + e.what());
    }
    {
      base::MutexLock lock(&mu_);
      accepting_ = true;
      mark_cycles_->store(mark_cycles, std::memory_order_relaxed);
      recording_->store(true, std::memory_order_relaxed);
    }
    active_ = true;
    return Status::OK();
  }

  Status Stop() {
    base::MutexLock control(&control_mu_);
    if (!active_) {
      return FailedPrecondition("no timeline is being recorded; call start_timeline(path) first");
    }
    return StopLocked();
  }

  void Close() {
    base::MutexLock control(&control_mu_);
    if (active_) (void)StopLocked();  // a write failure was logged when it happened
  }

  void Enqueue(Kind kind, std::string_view name, std::string text, std::string args, int rank) {
    Event e{kind, 0, std::string(name), std::move(text), std::move(args), rank};
    bool wake = false;
    {
      base::MutexLock lock(&mu_);
      if (!accepting_) return;  // stopped since the caller's atomic check
      e.ts_us = NowUs();
      queue_.push_back(std::move(e));
      wake = queue_.size() == kWakeBatch;
    }
    if (wake) cv_.NotifyOne();
  }

 private:
  struct Event {
    Kind kind;
    int64_t ts_us;
    std::string name;  // tensor name (empty for markers)
    std::string text;  // op, activity or marker text
    std::string args;  // JSON object text, or empty
    int rank = -1;
  };

  Status StopLocked() HVD_REQUIRES(control_mu_) {
    if (!writes_file_) {
      active_ = false;
      return Status::OK();
    }
    {
      base::MutexLock lock(&mu_);
      accepting_ = false;  // nothing can be enqueued from here on, so the writer's last batch
      closing_ = true;     // holds every event of this recording
      close_ts_us_ = NowUs();
      recording_->store(false, std::memory_order_relaxed);
      mark_cycles_->store(false, std::memory_order_relaxed);
    }
    cv_.NotifyOne();
    writer_.join();
    Write("\n]\n");
    if (std::fflush(file_) != 0) ReportWriteError();
    if (std::fclose(file_) != 0) ReportWriteError();
    file_ = nullptr;
    active_ = false;
    rows_ = {};  // a long recording may have named many tensors; a stopped timeline holds nothing
    if (write_failed_) {
      return Unavailable("timeline: writing '" + path_ + "' failed: " + ErrnoText(write_errno_) +
                         "; the trace is incomplete");
    }
    return Status::OK();
  }

  int64_t NowUs() const HVD_REQUIRES(mu_) {
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count();
  }

  void WriterLoop() {
    std::vector<Event> batch;
    std::string out;
    for (;;) {
      bool done;
      int64_t close_ts = 0;
      {
        base::MutexLock lock(&mu_);
        cv_.WaitFor(lock, kFlushInterval,
                    [this]() HVD_REQUIRES(mu_) { return closing_ || queue_.size() >= kWakeBatch; });
        batch.swap(queue_);
        done = closing_;  // nothing can be enqueued after closing_, so this batch is the last
        close_ts = close_ts_us_;
      }
      out.clear();
      for (const Event& e : batch) Format(e, &out);
      batch.clear();
      // Phases still open at Stop() (an op still running) end there, so every row of the
      // finished file is balanced.
      if (done) {
        for (auto& [name, row] : rows_) CloseOpen(&row, close_ts, {}, &out);
      }
      if (!out.empty()) {
        Write(out);
        if (std::fflush(file_) != 0) ReportWriteError();
      }
      if (done) return;
    }
  }

  // Writer thread while it runs; Start()/Stop() before it starts and after it is joined.
  void Write(const std::string& s) {
    if (write_failed_ || s.empty()) return;
    if (std::fwrite(s.data(), 1, s.size(), file_) != s.size()) ReportWriteError();
  }

  void ReportWriteError() {
    const int err = errno;
    if (write_failed_) return;
    write_failed_ = true;  // one warning, then drop events rather than flood the log
    write_errno_ = err;
    HVD_LOG(WARNING) << "timeline: writing " << path_ << " failed: " << ErrnoText(err)
                     << "; further events are dropped";
  }

  Row& RowFor(const std::string& name, std::string* out) {
    auto [it, inserted] = rows_.try_emplace(name);
    if (inserted) {
      it->second.pid = next_pid_++;
      AppendMetadata(it->second.pid, name, out);
    }
    return it->second;
  }

  void AppendMetadata(int pid, std::string_view process_name, std::string* out) {
    BeginEvent(out);
    *out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":";
    *out += std::to_string(pid);
    *out += ",\"tid\":0,\"args\":{\"name\":";
    AppendJsonString(process_name, out);
    *out += "}}";
  }

  void AppendPhase(char ph, std::string_view name, int pid, int64_t ts, std::string_view args,
                   std::string* out) {
    BeginEvent(out);
    *out += "{\"name\":";
    AppendJsonString(name, out);
    *out += ",\"ph\":\"";
    *out += ph;
    *out += "\",\"ts\":";
    *out += std::to_string(ts);
    *out += ",\"pid\":";
    *out += std::to_string(pid);
    *out += ",\"tid\":0";
    if (ph == 'i') *out += pid == 0 ? ",\"s\":\"g\"" : ",\"s\":\"p\"";
    if (!args.empty()) {
      *out += ",\"args\":";
      AppendJsonArgs(args, out);
    }
    *out += "}";
  }

  void BeginEvent(std::string* out) {
    if (!first_event_) *out += ",\n";
    first_event_ = false;
  }

  void Format(const Event& e, std::string* out) {
    if (e.kind == Kind::kMarker) {
      // Markers live on their own row (pid 0), named once.
      if (!marker_row_named_) {
        AppendMetadata(0, "hvd", out);
        marker_row_named_ = true;
      }
      AppendPhase('i', e.text, 0, e.ts_us, {}, out);
      return;
    }
    Row& row = RowFor(e.name, out);
    switch (e.kind) {
      case Kind::kNegotiateStart:
        // A resubmitted tensor restarts its negotiation; keep B/E balanced.
        CloseOpen(&row, e.ts_us, {}, out);
        AppendPhase('B', e.text, row.pid, e.ts_us, {}, out);
        row.negotiating = true;
        break;
      case Kind::kRankReady: {
        std::string text = "rank " + std::to_string(e.rank) + " ready";
        AppendPhase('i', text, row.pid, e.ts_us, "{\"rank\":" + std::to_string(e.rank) + "}", out);
        break;
      }
      case Kind::kNegotiateEnd:
        if (row.negotiating) AppendPhase('E', {}, row.pid, e.ts_us, {}, out);
        row.negotiating = false;
        break;
      case Kind::kActivityStart:
        CloseOpen(&row, e.ts_us, {}, out);
        AppendPhase('B', e.text, row.pid, e.ts_us, e.args, out);
        row.active = true;
        break;
      case Kind::kActivityEnd:
        if (row.active) AppendPhase('E', {}, row.pid, e.ts_us, {}, out);
        row.active = false;
        break;
      case Kind::kEnd:
        // The failure status rides on the last closing event; with nothing open it gets an
        // instant event of its own so it is never lost.
        if (!CloseOpen(&row, e.ts_us, e.args, out) && !e.args.empty()) {
          AppendPhase('i', "ERROR", row.pid, e.ts_us, e.args, out);
        }
        break;
      case Kind::kMarker:
        break;
    }
  }

  // Ends the open activity and negotiation of `row` (inner first); `args` go on the last E.
  // Returns whether anything was open.
  bool CloseOpen(Row* row, int64_t ts, std::string_view args, std::string* out) {
    bool any = row->active || row->negotiating;
    if (row->active) {
      AppendPhase('E', {}, row->pid, ts, row->negotiating ? std::string_view() : args, out);
      row->active = false;
    }
    if (row->negotiating) {
      AppendPhase('E', {}, row->pid, ts, args, out);
      row->negotiating = false;
    }
    return any;
  }

  const bool writes_file_;
  std::atomic<bool>* const recording_;
  std::atomic<bool>* const mark_cycles_;

  // Start()/Stop()/Close(), one at a time. Never taken by event callers or the writer.
  base::Mutex control_mu_;
  bool active_ HVD_GUARDED_BY(control_mu_) = false;  // started (recording, when writes_file_)
  std::thread writer_ HVD_GUARDED_BY(control_mu_);

  base::Mutex mu_;
  base::CondVar cv_;
  std::vector<Event> queue_ HVD_GUARDED_BY(mu_);
  bool accepting_ HVD_GUARDED_BY(mu_) = false;
  bool closing_ HVD_GUARDED_BY(mu_) = false;
  Clock::time_point start_ HVD_GUARDED_BY(mu_);
  int64_t close_ts_us_ HVD_GUARDED_BY(mu_) = 0;

  // The current recording: owned by the writer thread while it runs, by the Start()/Stop()
  // caller (holding control_mu_) before it starts and after it is joined.
  std::FILE* file_ = nullptr;
  std::string path_;
  std::unordered_map<std::string, Row> rows_;
  int next_pid_ = 1;  // pid 0 is the marker row
  bool marker_row_named_ = false;
  bool first_event_ = true;
  bool write_failed_ = false;
  int write_errno_ = 0;
};

Timeline::Timeline(bool writes_file)
    : impl_(std::make_unique<Impl>(writes_file, &recording_, &mark_cycles_)) {}

Timeline::~Timeline() = default;  // ~Impl() stops a recording

std::unique_ptr<Timeline> Timeline::Create(bool writes_file) {
  return std::make_unique<Timeline>(writes_file);
}

Status Timeline::Open(const std::string& path, std::unique_ptr<Timeline>* out) {
  auto tl = Create();
  HVD_RETURN_IF_ERROR(tl->Start(path));
  *out = std::move(tl);
  return Status::OK();
}

Status Timeline::Start(const std::string& path, bool mark_cycles) {
  return impl_->Start(path, mark_cycles);
}

Status Timeline::Stop() {
  return impl_->Stop();
}

void Timeline::Close() {
  impl_->Close();
}

namespace {
thread_local int t_process_set = 0;

// The row of `name` on this thread (ScopedProcessSet).
std::string RowName(std::string_view name) {
  std::string row(name);
  if (t_process_set != 0 && !row.empty()) {
    row += " [process set " + std::to_string(t_process_set) + "]";
  }
  return row;
}
}  // namespace

ScopedProcessSet::ScopedProcessSet(int set_id) : previous_(t_process_set) {
  t_process_set = set_id;
}
ScopedProcessSet::~ScopedProcessSet() {
  t_process_set = previous_;
}

void Timeline::Add(Kind kind, std::string_view name, std::string_view text, std::string_view args,
                   int rank) {
  std::string t;
  if (kind == Kind::kNegotiateStart) {
    // Horovod's name: "NEGOTIATE_" and the request type as its enum spells it
    // (NEGOTIATE_ALLREDUCE); the engine names operations in lower case.
    t = "NEGOTIATE_";
    for (char c : text) t += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  } else {
    t = text;
  }
  impl_->Enqueue(kind, RowName(name), std::move(t), std::string(args), rank);
}

void Timeline::AddEnd(std::string_view name, const Status& status) {
  std::string args;
  if (!status.ok()) {
    args = "{\"status\":";
    AppendJsonString(status.ToString(), &args);
    args += "}";
  }
  impl_->Enqueue(Kind::kEnd, RowName(name), {}, std::move(args), -1);
}

}  // namespace hvd::runtime::timeline
