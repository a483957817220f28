#include "launcherd/job_log.h"

#include <algorithm>
#include <string>
#include <vector>

namespace hvd::launcherd {

void JobLog::AddOutput(OutputLine line) {
  line.seq = next_seq_++;
  bytes_ += line.text.size();
  entries_.push_back(Entry{Entry::Kind::kOutput, std::move(line), {}, {}, 0});
  Trim();
}

void JobLog::AddProgress(std::string text) {
  bytes_ += text.size();
  entries_.push_back(Entry{Entry::Kind::kProgress, {}, std::move(text), {}, 0});
  Trim();
}

void JobLog::AddStatus(const JobStatus& status, uint64_t version) {
  // Back-to-back changes need only the latest snapshot, unless a watcher has already read the
  // previous one: replacing it then would hide the change from that watcher.
  if (!entries_.empty() && entries_.back().kind == Entry::Kind::kStatus && end() - 1 >= read_end_) {
    entries_.back().status = status;
    entries_.back().version = version;
    return;
  }
  Entry e;
  e.kind = Entry::Kind::kStatus;
  e.status = status;
  e.version = version;
  entries_.push_back(std::move(e));
  Trim();
}

void JobLog::Trim() {
  // Progress and status entries are few (bounded by rank and state changes) but still count
  // toward the cap, so the log stays bounded whatever is appended.
  while (entries_.size() > max_entries_ || (bytes_ > max_bytes_ && entries_.size() > 1)) {
    bytes_ -= entries_.front().output.text.size() + entries_.front().progress.size();
    entries_.pop_front();
    ++base_;
  }
}

std::string JobLog::StderrTail(int rank, size_t max_lines, int64_t from) const {
  std::vector<const std::string*> lines;  // newest first
  for (int64_t i = end() - 1; i >= std::max(begin(), from) && lines.size() < max_lines; --i) {
    const Entry& e = at(i);
    if (e.kind == Entry::Kind::kOutput && e.output.is_stderr && e.output.rank == rank) {
      lines.push_back(&e.output.text);
    }
  }
  std::string tail;
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    if (!tail.empty()) tail += '\n';
    tail += **it;
  }
  return tail;
}

int64_t JobLog::FirstOutputFrom(int64_t from_seq) const {
  // Output seqs increase with the index, so a binary search over the output entries would do;
  // entries are mostly output lines and a watch starts once, so a scan from the back is fine.
  int64_t first = end();
  for (int64_t i = end() - 1; i >= begin(); --i) {
    const Entry& e = at(i);
    if (e.kind != Entry::Kind::kOutput) continue;
    if (e.output.seq < from_seq) break;
    first = i;
  }
  return first;
}

}  // namespace hvd::launcherd
