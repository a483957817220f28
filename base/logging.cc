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

// HVD_LOG_LEVEL's value (or HOROVOD_LOG_LEVEL's), "" when neither is set.
std::string LevelText() {
  const char* v = std::getenv("HVD_LOG_LEVEL");
  if (v == nullptr) v = std::getenv("HOROVOD_LOG_LEVEL");
  return v == nullptr ? "" : v;
}

// False for a value that names no level.
bool ParseLevel(std::string s, LogLevel* out) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "trace")
    *out = LogLevel::TRACE;
  else if (s == "debug")
    *out = LogLevel::DEBUG;
  else if (s == "info")
    *out = LogLevel::INFO;
  else if (s == "warning" || s == "warn" || s.empty())
    *out = LogLevel::WARNING;
  else if (s == "error" || s == "fatal")
    *out = LogLevel::ERROR;  // (Horovod's fatal)
  else
    return false;
  return true;
}

// A value that names no level logs at the default here (logging cannot fail); CheckLogLevel
// makes it hvd::Init's error.
LogLevel LevelFromEnv() {
  LogLevel level = LogLevel::WARNING;
  return ParseLevel(LevelText(), &level) ? level : LogLevel::WARNING;
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

Status CheckLogLevel() {
  const std::string text = LevelText();
  LogLevel level;
  if (ParseLevel(text, &level)) return Status::OK();
  const char* name =
      std::getenv("HVD_LOG_LEVEL") != nullptr ? "HVD_LOG_LEVEL" : "HOROVOD_LOG_LEVEL";
  return InvalidArgument(std::string(name) + "=" + text +
                         " names no log level: give trace, debug, info, warning or error, or "
                         "unset it for warning");
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
