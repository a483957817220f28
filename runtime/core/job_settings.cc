#include "core/job_settings.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "base/settings.h"
#include "core/process_set_table.h"

namespace hvd::runtime::core {
namespace {

// The settings declared with base::kSameOnEveryRank in the linked program, once each, in name
// order: every rank lists them alike whatever order its settings were registered in.
std::vector<base::SettingInfo> JobWide() {
  std::vector<base::SettingInfo> out;
  for (const base::SettingInfo& s : base::AllSettings()) {
    if (s.same_on_every_rank()) out.push_back(s);
  }
  std::sort(out.begin(), out.end(),
            [](const base::SettingInfo& a, const base::SettingInfo& b) { return a.name < b.name; });
  out.erase(std::unique(out.begin(), out.end(),
                        [](const base::SettingInfo& a, const base::SettingInfo& b) {
                          return a.name == b.name;
                        }),
            out.end());
  return out;
}

// "134217728" for an integer, "1"/"0" for a boolean, else the text itself.
std::string Normalize(const std::string& text) {
  int64_t n;
  if (base::ParseInt64(text, &n).ok()) return std::to_string(n);
  bool b;
  if (base::ParseBool(text, &b).ok()) return b ? "1" : "0";
  return text;
}

// A value as a message shows it: hvd.init's process sets ("0,1;2", as published) as the lists of
// ranks the user passed ("[[0, 1], [2]]"), every other value as published.
std::string Shown(const std::string& name, const std::string& value) {
  std::vector<std::vector<int>> sets;
  if (name != "process_sets" || !ParseProcessSets(value, &sets).ok()) return value;
  std::string out = "[";
  for (size_t i = 0; i < sets.size(); ++i) {
    if (i > 0) out += ", ";
    out += RanksText(sets[i]);
  }
  return out + "]";
}

std::map<std::string, std::string> Parse(const std::string& line) {
  std::map<std::string, std::string> values;
  std::istringstream in(line);
  std::string item;
  while (in >> item) {
    const size_t eq = item.find('=');
    if (eq != std::string::npos) values[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return values;
}

}  // namespace

Status JobWideSettings(std::string* out) {
  out->clear();
  for (const base::SettingInfo& info : JobWide()) {
    std::string value, from;
    if (!base::LookupEnv(info.name, info.alias, &value, &from)) value = info.default_text;
    // Spaces separate the entries; a value with spaces is malformed for every setting here.
    if (value.find_first_of(" \t\n") != std::string::npos) {
      return InvalidArgument(from + "='" + value + "' is malformed: no spaces allowed");
    }
    *out += (out->empty() ? "" : " ") + info.name + "=" + Normalize(value);
  }
  return Status::OK();
}

Status CompareJobWideSettings(const std::string& mine, int my_rank, const std::string& theirs,
                              int their_rank) {
  if (mine == theirs) return Status::OK();
  const auto a = Parse(mine), b = Parse(theirs);
  std::vector<std::string> names;  // the declared settings first, then the rest (process sets)
  for (const base::SettingInfo& s : JobWide()) names.push_back(s.name);
  for (const auto* m : {&a, &b}) {
    for (const auto& [name, value] : *m) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  for (const std::string& name : names) {
    auto ia = a.find(name), ib = b.find(name);
    const std::string va = Shown(name, ia == a.end() ? "(missing)" : ia->second);
    const std::string vb = Shown(name, ib == b.end() ? "(missing)" : ib->second);
    if (va == vb) continue;
    return InvalidArgument(name + " is " + vb + " on rank " + std::to_string(their_rank) + " but " +
                           va + " on rank " + std::to_string(my_rank) +
                           "; settings that shape the collectives (fusion, algorithm "
                           "thresholds, ring chunk, shared memory, cache, process sets) must be "
                           "equal on every rank: set them for the whole job, not per rank");
  }
  return InvalidArgument("rank " + std::to_string(their_rank) + " published job settings '" +
                         theirs + "' but rank " + std::to_string(my_rank) + " has '" + mine +
                         "' (different hvd versions?)");
}

}  // namespace hvd::runtime::core
