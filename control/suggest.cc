#include "control/suggest.h"

#include <algorithm>

namespace hvd::control {
namespace {

std::string_view StripDashes(std::string_view s) {
  while (!s.empty() && s.front() == '-') s.remove_prefix(1);
  return s;
}

}  // namespace

int EditDistance(std::string_view a, std::string_view b) {
  // One row of the table at a time: names are short, but nothing here needs more than O(|b|).
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string NearestWord(std::string_view word, const std::vector<std::string>& candidates,
                        int max_distance) {
  std::string best;
  int best_distance = max_distance + 1;
  for (const std::string& c : candidates) {
    const int d = EditDistance(word, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::string NearestFlag(std::string_view unknown, const std::vector<std::string>& known) {
  const std::string_view bare = StripDashes(unknown);
  if (bare.empty()) return "";
  for (const std::string& k : known) {
    if (StripDashes(k) == bare) return k;
  }
  std::string prefix_of;
  for (const std::string& k : known) {
    const std::string_view kb = StripDashes(k);
    if (kb.size() > bare.size() && kb.compare(0, bare.size(), bare) == 0 &&
        (prefix_of.empty() || kb.size() < StripDashes(prefix_of).size())) {
      prefix_of = k;
    }
  }
  if (!prefix_of.empty()) return prefix_of;
  // Fewer edits than the name has letters: "-x" is not a typo of "-H".
  const int max = std::min<int>(2, static_cast<int>(bare.size()) - 1);
  std::string best;
  int best_distance = max + 1;
  for (const std::string& k : known) {
    const int d = EditDistance(bare, StripDashes(k));
    if (d < best_distance) {
      best = k;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace hvd::control
