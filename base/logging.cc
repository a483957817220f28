#include "base/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "base/settings.h"

namespace hvd::base {
namespace {

std::atomic<int> g_rank{-1};

// Declared for docs/configuration.md; read directly below because logging must work before (and
// without) anything else being set up.
const Setting<std::string> kLogLevel("HVD_LOG_LEVEL", "HOROVOD_LOG_LEVEL", "warning",
                                     "trace, debug, info, warning or error");

// HVD_LOG_LEVEL's value (or HOROVOD_LOG_LEVEL's), "" when neither is set; *from (if given):
// which one.
std::string LevelText(std::string* from) {
  std::string value;
  return LookupEnv("HVD_LOG_LEVEL", "HOROVOD_LOG_LEVEL", &value, from) ? value : "";
}

}  // namespace

bool ParseLogLevel(std::string s, LogLevel* out) {
  static const std::pair<const char*, LogLevel> kNames[] = {
      {"trace", LogLevel::TRACE},     {"debug", LogLevel::DEBUG},  {"info", LogLevel::INFO},
      {"warning", LogLevel::WARNING}, {"warn", LogLevel::WARNING}, {"", LogLevel::WARNING},
      {"error", LogLevel::ERROR},     {"fatal", LogLevel::ERROR}};
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& [name, level] : kNames) {
    if (s == name) {
      *out = level;
      return true;
    }
  }
  return false;
}

namespace {

// A value that names no level logs at the default here (logging cannot fail); CheckLogLevel
// makes it hvd::Init's error.
LogLevel LevelFromEnv() {
  LogLevel level = LogLevel::WARNING;
  return ParseLogLevel(LevelText(nullptr), &level) ? level : LogLevel::WARNING;
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
  std::string from;
  const std::string text = LevelText(&from);
  LogLevel level;
  if (ParseLogLevel(text, &level)) return Status::OK();
  return InvalidArgument(from + "=" + text +
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
