// Timeline implementation: callers enqueue small event records under a mutex (stamping the time
// there, so queue order is time order); one writer thread formats them as Chrome trace events and
// appends them to the file. All per-tensor state (row ids, which phase is open) lives on the writer
// thread, so the hot path never formats JSON or touches the disk.
#include "timeline/timeline.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "common/thread_annotations.h"
#include "timeline/timeline_json.h"

namespace hvd::runtime::timeline {
namespace {

using Clock = std::chrono::steady_clock;

// The writer wakes at least this often, so the file trails the run by at most this much; callers
// only signal it when a large batch has built up (signalling on every event would cost a futex
// wake per call).
constexpr auto kFlushInterval = std::chrono::milliseconds(100);
constexpr size_t kWakeBatch = 4096;

enum class Kind {
  kNegotiateStart,
  kRankReady,
  kNegotiateEnd,
  kActivityStart,
  kActivityEnd,
  kEnd,
  kMarker
};

struct Event {
  Kind kind;
  int64_t ts_us;
  std::string name;  // tensor name (empty for markers)
  std::string text;  // op, activity or marker text
  std::string args;  // JSON object text, or empty
  int rank = -1;
};

// What the writer knows about one tensor's row.
struct Row {
  int pid = 0;
  bool negotiating = false;
  bool active = false;  // an ActivityStart without its end yet
};

class TimelineImpl final : public Timeline {
 public:
  TimelineImpl(std::FILE* file, std::string path)
      : file_(file), path_(std::move(path)), start_(Clock::now()) {
    Write("[\n");
    writer_ = std::thread([this] { WriterLoop(); });
  }
  ~TimelineImpl() override { Close(); }

  void NegotiateStart(std::string_view name, std::string_view op) override {
    std::string text = "NEGOTIATE_";
    text += op;
    Enqueue(Kind::kNegotiateStart, name, std::move(text), {}, -1);
  }
  void NegotiateRankReady(std::string_view name, int rank) override {
    Enqueue(Kind::kRankReady, name, {}, {}, rank);
  }
  void NegotiateEnd(std::string_view name) override {
    Enqueue(Kind::kNegotiateEnd, name, {}, {}, -1);
  }
  void ActivityStart(std::string_view name, std::string_view activity,
                     std::string_view args_json) override {
    Enqueue(Kind::kActivityStart, name, std::string(activity), std::string(args_json), -1);
  }
  void ActivityEnd(std::string_view name) override {
    Enqueue(Kind::kActivityEnd, name, {}, {}, -1);
  }
  void End(std::string_view name, const Status& status) override {
    std::string args;
    if (!status.ok()) {
      args = "{\"status\":";
      AppendJsonString(status.ToString(), &args);
      args += "}";
    }
    Enqueue(Kind::kEnd, name, {}, std::move(args), -1);
  }
  void Marker(std::string_view text) override {
    Enqueue(Kind::kMarker, {}, std::string(text), {}, -1);
  }

  void Close() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closing_) return;
      closing_ = true;
      close_ts_us_ = NowUs();
    }
    cv_.notify_one();
    writer_.join();
    Write("\n]\n");
    if (std::fflush(file_) != 0) ReportWriteError();
    if (std::fclose(file_) != 0) ReportWriteError();
    file_ = nullptr;
  }

 private:
  void Enqueue(Kind kind, std::string_view name, std::string text, std::string args, int rank) {
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closing_) return;  // events after Close() have nowhere to go
      queue_.push_back(
          Event{kind, NowUs(), std::string(name), std::move(text), std::move(args), rank});
      wake = queue_.size() == kWakeBatch;
    }
    if (wake) cv_.notify_one();
  }

  int64_t NowUs() const {
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count();
  }

  void WriterLoop() {
    std::vector<Event> batch;
    std::string out;
    for (;;) {
      bool done;
      int64_t close_ts = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, kFlushInterval,
                     [this] { return closing_ || queue_.size() >= kWakeBatch; });
        batch.swap(queue_);
        done = closing_;  // nothing can be enqueued after closing_, so this batch is the last
        close_ts = close_ts_us_;
      }
      out.clear();
      for (const Event& e : batch) Format(e, &out);
      batch.clear();
      // Phases still open at Close() (an op cut short by shutdown) end there, so every row of
      // the finished file is balanced.
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

  // Writer thread only (and Close() after the join).
  void Write(const std::string& s) {
    if (write_failed_ || s.empty()) return;
    if (std::fwrite(s.data(), 1, s.size(), file_) != s.size()) ReportWriteError();
  }

  void ReportWriteError() {
    if (write_failed_) return;
    write_failed_ = true;  // one warning, then drop events rather than flood the log
    HVD_LOG(WARNING) << "timeline: writing " << path_
                     << " failed: " << std::generic_category().message(errno)
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

  std::FILE* file_;
  const std::string path_;
  const Clock::time_point start_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Event> queue_ GUARDED_BY(mu_);
  bool closing_ GUARDED_BY(mu_) = false;
  int64_t close_ts_us_ GUARDED_BY(mu_) = 0;
  std::thread writer_;

  // Writer thread only.
  std::unordered_map<std::string, Row> rows_;
  int next_pid_ = 1;  // pid 0 is the marker row
  bool marker_row_named_ = false;
  bool first_event_ = true;
  bool write_failed_ = false;
};

}  // namespace

Status Timeline::Open(const std::string& path, std::unique_ptr<Timeline>* out) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return InvalidArgument("timeline: cannot open '" + path + "' for writing: " +
                           std::generic_category().message(errno) + " (check HVD_TIMELINE)");
  }
  *out = std::make_unique<TimelineImpl>(f, path);
  return Status::OK();
}

}  // namespace hvd::runtime::timeline
