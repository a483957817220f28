#include "base/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/settings.h"

namespace hvd::base {
namespace {

std::atomic<int> g_rank{-1};

// Declared for docs/configuration.md; read directly below because logging must work before (and
// without) anything else being set up.
const Setting<std::string> kLogLevel("HVD_LOG_LEVEL", "HOROVOD_LOG_LEVEL", "warning",
                                     "trace, debug, info, warning or error");

LogLevel LevelFromEnv() {
  const char* v = std::getenv("HVD_LOG_LEVEL");
  if (v == nullptr) v = std::getenv("HOROVOD_LOG_LEVEL");
  if (v == nullptr) return LogLevel::WARNING;
  std::string s(v);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "trace") return LogLevel::TRACE;
  if (s == "debug") return LogLevel::DEBUG;
  if (s == "info") return LogLevel::INFO;
  if (s == "error" || s == "fatal") return LogLevel::ERROR;
  return LogLevel::WARNING;
}

const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::TRACE:
      return "TRACE";
    case LogLevel::DEBUG:
      return "DEBUG";
    case LogLevel::INFO:
      return "INFO";
    case LogLevel::WARNING:
      return "WARNING";
    case LogLevel::ERROR:
      return "ERROR";
  }
  return "?";
}

}  // namespace

bool LogEnabled(LogLevel level) {
  static const LogLevel threshold = LevelFromEnv();
  return level >= threshold;
}

void SetLogRank(int rank) {
  g_rank.store(rank);
}

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  const char* base = std::strrchr(file, '/');
  int rank = g_rank.load();
  os_ << "[hvd";
  if (rank >= 0) os_ << " rank " << rank;
  os_ << "] " << LevelName(level_) << " " << (base ? base + 1 : file) << ":" << line << ": ";
}

LogMessage::~LogMessage() {
  os_ << '\n';
  std::string s = os_.str();
  // One write(2) so lines from several threads and processes do not interleave.
  ssize_t unused = ::write(STDERR_FILENO, s.data(), s.size());
  (void)unused;
}

}  // namespace hvd::base
