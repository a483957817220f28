// Turning a worker's raw stdout/stderr bytes into the lines the launcher receives. Pure: no I/O,
// so partial lines, very long lines and binary junk are tested byte by byte.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <string_view>

namespace hvd::agent {

// Returns `bytes` as valid UTF-8: each byte that does not start a well-formed sequence becomes
// U+FFFD. Output lines travel in protobuf `string` fields, which a peer refuses to parse when they
// hold invalid UTF-8; a worker printing binary must not break its job's output stream.
std::string SanitizeUtf8(std::string_view bytes);

// Splits a byte stream into lines. A line longer than `max_line_bytes` is cut there and marked
// "... [hvd: line truncated, N bytes dropped]" so one runaway write cannot exhaust the agent's
// memory or exceed the launcher's message size; the rest of that line is dropped.
class LineSplitter {
 public:
  using LineFn = std::function<void(std::string line)>;  // without its newline, valid UTF-8
  LineSplitter(size_t max_line_bytes, LineFn on_line)
      : max_line_bytes_(max_line_bytes), on_line_(std::move(on_line)) {}

  void Feed(std::string_view bytes);
  // Delivers a last line that has no newline (the stream ended). Idempotent.
  void Finish();

 private:
  void Emit();

  size_t max_line_bytes_;
  LineFn on_line_;
  std::string pending_;
  size_t dropped_ = 0;  // bytes of the current line beyond max_line_bytes_
};

// The last `max_lines` lines of a stream (a worker's stderr), for the exit report.
class LineTail {
 public:
  explicit LineTail(size_t max_lines, size_t max_bytes = 16 << 10)
      : max_lines_(max_lines), max_bytes_(max_bytes) {}
  void Add(const std::string& line);
  // The lines joined by '\n', at most max_bytes (the newest ones are kept).
  std::string Text() const;

 private:
  size_t max_lines_;
  size_t max_bytes_;
  std::deque<std::string> lines_;
};

}  // namespace hvd::agent
