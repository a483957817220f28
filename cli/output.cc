#include "cli/output.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace hvd::cli {
namespace {

// mkdir -p: creates each missing component; an existing directory is fine.
Status MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    const std::string prefix = path.substr(0, i);
    if (mkdir(prefix.c_str(), 0755) == 0 || errno == EEXIST) continue;
    return InvalidArgument("cannot create directory " + prefix + ": " + std::strerror(errno));
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return InvalidArgument(path + " exists and is not a directory");
  }
  return Status::OK();
}

}  // namespace

std::string TagLine(int rank, bool is_stderr, std::string_view text) {
  // Appended piecewise: GCC 12 warns (-Wrestrict, falsely) on "[" + std::to_string(...).
  std::string out = "[";
  out += std::to_string(rank);
  out += is_stderr ? "]<stderr>:" : "]<stdout>:";
  out.append(text);
  return out;
}

std::string RankDirName(int rank, int np) {
  std::string digits = std::to_string(rank);
  const size_t width = np > 0 ? std::to_string(np - 1).size() : 0;
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return "rank." + digits;
}

Status OutputSink::Create(const std::string& dir, FILE* out, FILE* err,
                          std::unique_ptr<OutputSink>* sink) {
  return Create(dir, 0, out, err, sink);
}

Status OutputSink::Create(const std::string& dir, int np, FILE* out, FILE* err,
                          std::unique_ptr<OutputSink>* sink) {
  if (!dir.empty()) {
    HVD_RETURN_IF_ERROR_CTX(MakeDirs(dir), "--output-filename");
    for (int rank = 0; rank < np; ++rank) {
      const std::string rank_dir = dir + "/" + RankDirName(rank, np);
      HVD_RETURN_IF_ERROR_CTX(MakeDirs(rank_dir), "--output-filename");
      for (const char* name : {"/stdout", "/stderr"}) {
        // Truncate: the files hold this job's output only, as horovodrun's do.
        const std::string path = rank_dir + name;
        FILE* f = std::fopen(path.c_str(), "we");
        if (f == nullptr) {
          return InvalidArgument("--output-filename: cannot create " + path + ": " +
                                 std::strerror(errno));
        }
        std::fclose(f);
      }
    }
  }
  sink->reset(new OutputSink(dir, np, out, err));
  return Status::OK();
}

OutputSink::~OutputSink() {
  for (auto& [key, f] : files_) {
    if (f != nullptr) std::fclose(f);
  }
}

FILE* OutputSink::FileFor(int rank, bool is_stderr) {
  const auto key = std::make_pair(rank, is_stderr);
  if (auto it = files_.find(key); it != files_.end()) return it->second;
  const std::string rank_dir = dir_ + "/" + RankDirName(rank, np_);
  const std::string path = rank_dir + (is_stderr ? "/stderr" : "/stdout");
  FILE* f = nullptr;
  Status s = MakeDirs(rank_dir);
  if (s.ok()) {
    // Created empty up front for the first np ranks (Create); otherwise (a worker added later,
    // or np unknown) truncated now: the files hold this job's output only, as horovodrun's do.
    f = std::fopen(path.c_str(), np_ > 0 && rank < np_ ? "ae" : "we");
    if (f == nullptr) s = InvalidArgument("cannot open " + path + ": " + std::strerror(errno));
  }
  if (!s.ok())
    MessageLocked("hvdrun: " + s.message() + "; rank " + std::to_string(rank) +
                  "'s output is shown here but not saved");
  files_[key] = f;
  // A rank Create did not make files for (an elastic job's worker added later) gets both, as the
  // others have: an empty stderr says it wrote none.
  if (f != nullptr && np_ > 0 && rank >= np_ && !files_.count({rank, !is_stderr})) {
    const std::string other = rank_dir + (is_stderr ? "/stdout" : "/stderr");
    FILE* o = std::fopen(other.c_str(), "we");
    if (o == nullptr) {
      MessageLocked("hvdrun: cannot open " + other + ": " + std::strerror(errno) + "; rank " +
                    std::to_string(rank) + "'s " + (is_stderr ? "stdout" : "stderr") +
                    " is shown here but not saved");
    }
    files_[{rank, !is_stderr}] = o;
  }
  return f;
}

void OutputSink::Write(const control::OutputLine& line) {
  base::MutexLock lock(&mu_);
  FILE* term = line.is_stderr ? err_ : out_;
  std::string tagged = TagLine(line.rank, line.is_stderr, line.text);
  if (timestamps_) {
    char stamp[64];
    const time_t now = time(nullptr);
    struct tm tm;
    localtime_r(&now, &tm);
    tagged.insert(0, stamp, std::strftime(stamp, sizeof(stamp), "%a %b %e %H:%M:%S %Y", &tm));
  }
  std::fwrite(tagged.data(), 1, tagged.size(), term);
  std::fputc('\n', term);
  // Flushed per line so interleaving with the other stream stays close to real time.
  std::fflush(term);
  if (dir_.empty()) return;
  FILE* f = FileFor(line.rank, line.is_stderr);
  if (f == nullptr) return;
  std::fwrite(line.text.data(), 1, line.text.size(), f);
  std::fputc('\n', f);
  if (std::fflush(f) != 0) {
    MessageLocked("hvdrun: writing rank " + std::to_string(line.rank) + "'s output under " + dir_ +
                  " failed: " + std::strerror(errno) + "; no longer saving it");
    std::fclose(f);
    files_[{line.rank, line.is_stderr}] = nullptr;
  }
}

void OutputSink::Message(const std::string& text) {
  base::MutexLock lock(&mu_);
  MessageLocked(text);
}

void OutputSink::MessageLocked(const std::string& text) {
  std::fflush(out_);
  std::fwrite(text.data(), 1, text.size(), err_);
  std::fputc('\n', err_);
  std::fflush(err_);
}

}  // namespace hvd::cli
