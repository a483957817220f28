#include "core/process_set_table.h"

#include <algorithm>
#include <numeric>

#include "base/settings.h"

namespace hvd::runtime::core {

ProcessSetTable::ProcessSetTable(int size) {
  std::vector<int> all(size);
  std::iota(all.begin(), all.end(), 0);
  sets_[0] = std::move(all);
}

bool ProcessSetTable::Get(int id, std::vector<int>* ranks) const {
  base::MutexLock lock(&mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return false;
  if (ranks != nullptr) *ranks = it->second;
  return true;
}

std::vector<int> ProcessSetTable::Ids() const {
  base::MutexLock lock(&mu_);
  std::vector<int> ids;
  for (const auto& [id, ranks] : sets_) ids.push_back(id);
  return ids;
}

int ProcessSetTable::Find(const std::vector<int>& ranks) const {
  base::MutexLock lock(&mu_);
  for (const auto& [id, r] : sets_) {
    if (r == ranks) return id;
  }
  return -1;
}

std::string ProcessSetTable::DescribeIds() const {
  std::string s;
  for (int id : Ids()) s += (s.empty() ? "" : ", ") + std::to_string(id);
  return s;
}

int ProcessSetTable::Add(std::vector<int> ranks) {
  base::MutexLock lock(&mu_);
  const int id = next_id_++;
  sets_[id] = std::move(ranks);
  return id;
}

bool ProcessSetTable::Remove(int id) {
  base::MutexLock lock(&mu_);
  return sets_.erase(id) > 0;
}

Status ValidateProcessSetRanks(const std::vector<int>& ranks, int size, std::vector<int>* sorted) {
  if (ranks.empty()) {
    return InvalidArgument(
        "a process set needs at least one rank (the global set, id 0, is "
        "every rank and always exists)");
  }
  std::vector<int> s = ranks;
  std::sort(s.begin(), s.end());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] < 0 || s[i] >= size) {
      return InvalidArgument("process set rank " + std::to_string(s[i]) +
                             " is not a rank of this job (ranks 0.." + std::to_string(size - 1) +
                             ")");
    }
    if (i > 0 && s[i] == s[i - 1]) {
      return InvalidArgument("rank " + std::to_string(s[i]) +
                             " appears twice in a process set; list each rank once");
    }
  }
  *sorted = std::move(s);
  return Status::OK();
}

Status ParseProcessSets(const std::string& text, std::vector<std::vector<int>>* out) {
  out->clear();
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    size_t end = text.find(';', start);
    if (end == std::string::npos) end = text.size();
    const std::string set = text.substr(start, end - start);
    std::vector<int> ranks;
    size_t p = 0;
    while (p <= set.size()) {
      size_t q = set.find(',', p);
      if (q == std::string::npos) q = set.size();
      int64_t v = 0;
      Status s = base::ParseInt64(set.substr(p, q - p), &v);
      if (!s.ok() || v < 0 || v > (1 << 20)) {
        return InvalidArgument("HVD_PROCESS_SETS='" + text + "': '" + set.substr(p, q - p) +
                               "' is not a rank; write sets of comma-separated ranks separated "
                               "by ';', e.g. '0,1;2,3'");
      }
      ranks.push_back(static_cast<int>(v));
      p = q + 1;
    }
    out->push_back(std::move(ranks));
    start = end + 1;
  }
  return Status::OK();
}

std::string FormatProcessSets(const std::vector<std::vector<int>>& sets) {
  std::string s;
  for (const auto& set : sets) {
    std::vector<int> sorted = set;
    std::sort(sorted.begin(), sorted.end());
    if (!s.empty()) s += ';';
    for (size_t i = 0; i < sorted.size(); ++i) {
      if (i > 0) s += ',';
      s += std::to_string(sorted[i]);
    }
  }
  return s;
}

std::string RanksText(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(ranks[i]);
  }
  return s + "]";
}

}  // namespace hvd::runtime::core
