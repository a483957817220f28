// How hvdrun shows a job's output: every line tagged with its rank and stream the way horovodrun
// does (`[1]<stdout>:text`), so existing log filters keep working; stdout lines go to hvdrun's
// stdout and stderr lines to its stderr. With --output-filename DIR each rank's lines are also
// written untagged to DIR/rank.N/stdout and DIR/rank.N/stderr, N zero-padded to the width of the
// last rank as horovodrun does (rank.00 ... rank.15 for 16 ranks), so the names sort in rank
// order.
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "base/mutex.h"
#include "control/job_model.h"
#include "hvd/status.h"

namespace hvd::cli {

// "[1]<stdout>:text" (no newline).
std::string TagLine(int rank, bool is_stderr, std::string_view text);

// "rank.07" for rank 7 of 16: the rank zero-padded to the digits of np - 1 (horovodrun's
// _pad_rank); unpadded when np is unknown (0).
std::string RankDirName(int rank, int np);

// Thread-safe: the event stream, the signal handling thread and the pending-reason reporter all
// write through it, and each line stays whole.
class OutputSink {
 public:
  // `dir` empty: terminal only. Otherwise creates `dir` (and its parents) now, so a bad path fails
  // before the job is submitted; error names the path and the system's reason. `out` and `err`
  // are where tagged lines go (stdout and stderr in hvdrun, temporary files in tests).
  static Status Create(const std::string& dir, FILE* out, FILE* err,
                       std::unique_ptr<OutputSink>* sink);
  // With the job's `np`: also creates DIR/rank.N/stdout and DIR/rank.N/stderr for every rank now,
  // empty (truncating a previous job's), so every rank has its files even if it never prints and
  // a directory that cannot hold them fails before the job is submitted.
  static Status Create(const std::string& dir, int np, FILE* out, FILE* err,
                       std::unique_ptr<OutputSink>* sink);
  ~OutputSink();
  OutputSink(const OutputSink&) = delete;
  OutputSink& operator=(const OutputSink&) = delete;

  // Prints the tagged line and appends the raw line to the rank's file. A file that cannot be
  // opened or written is reported on `err` once and then skipped: losing a copy of the log must
  // not end a training job.
  void Write(const control::OutputLine& line);

  // Writes an hvdrun message ("hvdrun: ...") to `err`, keeping it ordered with the job's lines.
  void Message(const std::string& text);

  // horovodrun's --prefix-output-with-timestamp: every tagged line starts with the local time as
  // Python's time.asctime() writes it ("Tue Jan  2 15:04:05 2024[1]<stdout>:text"). The rank
  // files stay untagged, as horovodrun's.
  void SetTimestamps(bool on) HVD_EXCLUDES(mu_) {
    base::MutexLock lock(&mu_);
    timestamps_ = on;
  }

 private:
  OutputSink(std::string dir, int np, FILE* out, FILE* err)
      : dir_(std::move(dir)), np_(np), out_(out), err_(err) {}
  FILE* FileFor(int rank, bool is_stderr) HVD_REQUIRES(mu_);
  void MessageLocked(const std::string& text) HVD_REQUIRES(mu_);

  base::Mutex mu_;

  std::string dir_;
  int np_;  // 0: unknown (rank directories unpadded, made when a rank first prints)
  FILE* out_;
  FILE* err_;
  // nullptr: failed once, skipped since.
  std::map<std::pair<int, bool>, FILE*> files_ HVD_GUARDED_BY(mu_);
  bool timestamps_ HVD_GUARDED_BY(mu_) = false;
};

}  // namespace hvd::cli
