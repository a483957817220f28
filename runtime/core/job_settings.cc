#include "core/job_settings.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "common/settings.h"

namespace hvd::runtime::core {
namespace {

// Declared in context.cc and comm_setup.cc; settings_doc_test keeps the names honest, and
// JobWideSettings fails loudly if one is renamed without updating this list.
constexpr const char* kJobWide[] = {
    "HVD_FUSION_THRESHOLD",
    "HVD_FUSION_MAX_TENSOR_BYTES",
    "HVD_CACHE_CAPACITY",
    "HVD_SHM",
    "HVD_DIRECT_ALLREDUCE_MAX_BYTES_SHM",
    "HVD_DIRECT_ALLREDUCE_MAX_BYTES_TCP",
    "HVD_RING_CHUNK_BYTES",
    "HVD_HIERARCHICAL_ALLREDUCE",
};

// "134217728" for an integer, "1"/"0" for a boolean, else the text itself.
std::string Normalize(const std::string& text) {
  int64_t n;
  if (common::ParseInt64(text, &n).ok()) return std::to_string(n);
  bool b;
  if (common::ParseBool(text, &b).ok()) return b ? "1" : "0";
  return text;
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
  for (const char* name : kJobWide) {
    const common::SettingInfo* info = nullptr;
    for (const common::SettingInfo& s : common::AllSettings()) {
      if (s.name == name) info = &s;
    }
    if (info == nullptr)
      return Internal(std::string("job-wide setting ") + name + " is not declared");
    std::string value, from;
    if (!common::LookupEnv(info->name, info->alias, &value, &from)) value = info->default_text;
    // Spaces separate the entries; a value with spaces is malformed for every setting here.
    if (value.find_first_of(" \t\n") != std::string::npos) {
      return InvalidArgument(from + "='" + value + "' is malformed: no spaces allowed");
    }
    *out += (out->empty() ? "" : " ") + info->name + "=" + Normalize(value);
  }
  return Status::OK();
}

Status CompareJobWideSettings(const std::string& mine, int my_rank, const std::string& theirs,
                              int their_rank) {
  if (mine == theirs) return Status::OK();
  const auto a = Parse(mine), b = Parse(theirs);
  std::vector<std::string> names;  // the declared settings first, then the rest (process sets)
  for (const char* name : kJobWide) names.push_back(name);
  for (const auto* m : {&a, &b}) {
    for (const auto& [name, value] : *m) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  for (const std::string& name : names) {
    auto ia = a.find(name), ib = b.find(name);
    const std::string va = ia == a.end() ? "(missing)" : ia->second;
    const std::string vb = ib == b.end() ? "(missing)" : ib->second;
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
