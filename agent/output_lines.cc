#include "agent/output_lines.h"

namespace hvd::agent {
namespace {

// Length of the well-formed UTF-8 sequence at s[i], or 0 when it is not one (RFC 3629 table:
// no overlong forms, no surrogates, nothing above U+10FFFF).
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto cont = [&](size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) {
    return i + k < s.size() && b(k) >= lo && b(k) <= hi;
  };
  const unsigned c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

}  // namespace

std::string SanitizeUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const size_t n = Utf8SequenceLength(bytes, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
      ++i;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

void LineSplitter::Feed(std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    const std::string_view piece = bytes.substr(0, nl);
    const size_t room = max_line_bytes_ - pending_.size();
    if (piece.size() <= room) {
      pending_.append(piece);
    } else {
      pending_.append(piece.substr(0, room));
      dropped_ += piece.size() - room;
    }
    if (nl == std::string_view::npos) return;
    Emit();
    bytes.remove_prefix(nl + 1);
  }
}

void LineSplitter::Finish() {
  if (!pending_.empty() || dropped_ > 0) Emit();
}

void LineSplitter::Emit() {
  // "\r\n" endings (Windows-style tools, some progress bars) end a line like "\n".
  if (!pending_.empty() && pending_.back() == '\r' && dropped_ == 0) pending_.pop_back();
  std::string line = SanitizeUtf8(pending_);
  if (dropped_ > 0) {
    line += "... [hvd: line truncated, " + std::to_string(dropped_) + " bytes dropped]";
  }
  pending_.clear();
  dropped_ = 0;
  on_line_(std::move(line));
}

void LineTail::Add(const std::string& line) {
  lines_.push_back(line);
  while (lines_.size() > max_lines_) lines_.pop_front();
}

std::string LineTail::Text() const {
  std::string text;
  for (const std::string& l : lines_) {
    if (!text.empty()) text += '\n';
    text += l;
  }
  if (text.size() > max_bytes_) {
    // Keep the newest bytes; the cut may split a character, which SanitizeUtf8 repairs.
    text = SanitizeUtf8(std::string_view(text).substr(text.size() - max_bytes_));
  }
  return text;
}

}  // namespace hvd::agent
