// hvd::Status: the result of every fallible call in hvd.
//
// An OK status carries nothing. An error carries a code and a message that says what failed, who
// was involved (rank, host:port, tensor name) and, where it helps, what to do. Callers add context
// as an error travels up ("ring allreduce: recv from rank 2 (127.0.0.1:4711): connection reset").
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace hvd {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // the caller passed something wrong; the message says what
  kNotFound = 2,         // a key, file or peer does not exist
  kAlreadyExists = 3,
  kDeadlineExceeded = 4,    // a wait ran past its deadline; the message says who is missing
  kUnavailable = 5,         // a peer disconnected or could not be reached
  kFailedPrecondition = 6,  // e.g. an operation before init() or after shutdown()
  kAborted = 7,             // the operation was failed on every rank (mismatch, stall, shutdown)
  kInternal = 8,            // a bug in hvd
  kUnimplemented = 9,
  kCancelled = 10,
};

class Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns this error with `context` prepended ("context: message"); OK stays OK.
  Status WithContext(std::string_view context) const {
    if (ok()) return *this;
    std::string m(context);
    m += ": ";
    m += message_;
    return Status(code_, std::move(m));
  }

  // "OK", or "DEADLINE_EXCEEDED: rendezvous: rank 3 did not publish ...".
  std::string ToString() const {
    if (ok()) return "OK";
    std::string s(CodeName(code_));
    s += ": ";
    s += message_;
    return s;
  }

  static const char* CodeName(StatusCode c) {
    switch (c) {
      case StatusCode::kOk:
        return "OK";
      case StatusCode::kInvalidArgument:
        return "INVALID_ARGUMENT";
      case StatusCode::kNotFound:
        return "NOT_FOUND";
      case StatusCode::kAlreadyExists:
        return "ALREADY_EXISTS";
      case StatusCode::kDeadlineExceeded:
        return "DEADLINE_EXCEEDED";
      case StatusCode::kUnavailable:
        return "UNAVAILABLE";
      case StatusCode::kFailedPrecondition:
        return "FAILED_PRECONDITION";
      case StatusCode::kAborted:
        return "ABORTED";
      case StatusCode::kInternal:
        return "INTERNAL";
      case StatusCode::kUnimplemented:
        return "UNIMPLEMENTED";
      case StatusCode::kCancelled:
        return "CANCELLED";
    }
    return "UNKNOWN";
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status NotFound(std::string m) {
  return Status(StatusCode::kNotFound, std::move(m));
}
inline Status AlreadyExists(std::string m) {
  return Status(StatusCode::kAlreadyExists, std::move(m));
}
inline Status DeadlineExceeded(std::string m) {
  return Status(StatusCode::kDeadlineExceeded, std::move(m));
}
inline Status Unavailable(std::string m) {
  return Status(StatusCode::kUnavailable, std::move(m));
}
inline Status FailedPrecondition(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
inline Status Aborted(std::string m) {
  return Status(StatusCode::kAborted, std::move(m));
}
inline Status Internal(std::string m) {
  return Status(StatusCode::kInternal, std::move(m));
}
inline Status Unimplemented(std::string m) {
  return Status(StatusCode::kUnimplemented, std::move(m));
}

}  // namespace hvd

// Returns from the enclosing function when `expr` is an error.
#define HVD_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::hvd::Status _hvd_status = (expr);        \
    if (!_hvd_status.ok()) return _hvd_status; \
  } while (0)

// Same, prepending `ctx` (anything convertible to std::string_view) to the message.
#define HVD_RETURN_IF_ERROR_CTX(expr, ctx)                      \
  do {                                                          \
    ::hvd::Status _hvd_status = (expr);                         \
    if (!_hvd_status.ok()) return _hvd_status.WithContext(ctx); \
  } while (0)
