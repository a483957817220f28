// Minimal leveled logging to stderr, one line per message, prefixed with the rank once known
// (libhvd.so's ranks); the launcher, the agent and hvdrun log through it too.
//
//   HVD_LOG(WARNING) << "stall: rank 3 has not submitted " << name;
//
// The level comes from HVD_LOG_LEVEL (trace, debug, info, warning, error; default warning).
#pragma once

#include <sstream>

#include <string>

#include "hvd/status.h"

namespace hvd::base {

enum class LogLevel { TRACE = 0, DEBUG = 1, INFO = 2, WARNING = 3, ERROR = 4 };

bool LogEnabled(LogLevel level);
// The level an HVD_LOG_LEVEL value names (any case; "warn" is warning, Horovod's "fatal" error,
// "" the default, warning); false when it names none.
bool ParseLogLevel(std::string text, LogLevel* out);
// InvalidArgument naming HVD_LOG_LEVEL (or HOROVOD_LOG_LEVEL) when it is set to no level (any
// case; "fatal", Horovod's, is error): logging itself cannot fail, and uses warning then.
Status CheckLogLevel();
// Sets the "[hvd rank N]" prefix; -1 clears it.
void SetLogRank(int rank);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();  // writes the whole line atomically
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return os_; }

 private:
  LogLevel level_;
  std::ostringstream os_;
};

}  // namespace hvd::base

#define HVD_LOG(level)                                          \
  if (!::hvd::base::LogEnabled(::hvd::base::LogLevel::level)) { \
  } else                                                        \
    ::hvd::base::LogMessage(::hvd::base::LogLevel::level, __FILE__, __LINE__).stream()
