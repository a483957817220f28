#include "cli/stall_news.h"

#include <cctype>

namespace hvd::cli {

std::string StallShape(const std::string& stall) {
  const auto digit = [&](size_t k) {
    return k < stall.size() && std::isdigit(static_cast<unsigned char>(stall[k]));
  };
  std::string out;
  size_t i = 0;
  while (i < stall.size()) {
    if (!digit(i) || (i > 0 && std::isalnum(static_cast<unsigned char>(stall[i - 1])))) {
      out += stall[i++];
      continue;
    }
    size_t j = i;
    while (digit(j) || (stall[j] == '.' && digit(j + 1))) ++j;
    size_t unit = j < stall.size() && stall[j] == ' ' ? j + 1 : j;  // "3 s" or "3s"
    const bool seconds =
        unit < stall.size() && stall[unit] == 's' &&
        (unit + 1 == stall.size() || !std::isalnum(static_cast<unsigned char>(stall[unit + 1])));
    out += seconds ? "#" : stall.substr(i, j - i);
    i = j;
  }
  return out;
}

std::string StallNews(const std::string& job_id, const control::JobStatus& before,
                      const control::JobStatus& after) {
  if (StallShape(after.stall) == StallShape(before.stall)) return "";
  if (!after.stall.empty()) return "hvdrun: job " + job_id + " stalled: " + after.stall;
  // Cleared by a new elastic generation, not by progress (Job::NewGeneration).
  if (after.elastic.generation != before.elastic.generation) return "";
  return "hvdrun: job " + job_id + " is making progress again";
}

}  // namespace hvd::cli
