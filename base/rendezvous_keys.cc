#include "base/rendezvous_keys.h"

#include <cstdlib>
#include <vector>

namespace hvd::base {
namespace {

std::vector<std::string_view> Split(std::string_view key) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t slash = key.find('/', start);
    parts.push_back(key.substr(start, slash == std::string_view::npos ? slash : slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return parts;
}

// Plain decimal digits up to `max`; false for anything else (a sign, spaces, an overflow).
bool Decimal(std::string_view text, int64_t max, int64_t* out) {
  if (text.empty() || text.size() > 18) return false;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v > max) return false;
  *out = v;
  return true;
}

}  // namespace

std::string JobPrefix(std::string_view job_id) {
  return "job/" + std::string(job_id) + "/";
}

std::string AttemptScope(std::string_view job_id, int64_t attempt) {
  return JobPrefix(job_id) + "attempt/" + std::to_string(attempt);
}

std::string AttemptPrefix(std::string_view job_id, int64_t attempt) {
  return AttemptScope(job_id, attempt) + "/";
}

std::string IncarnationScope(std::string_view attempt_scope, int incarnation) {
  return std::string(attempt_scope) + "/init/" + std::to_string(incarnation);
}

std::string ElasticLatestKey() {
  return "elastic/latest";
}

Status ParseElasticWorkers(const std::string& text, std::vector<int>* out) {
  out->clear();
  size_t at = 0;
  while (at <= text.size() && !text.empty()) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > (1 << 20)) {
      return InvalidArgument("elastic membership \"" + text.substr(0, 200) +
                             "\" is not a list of worker ids (a launcher of another version?)");
    }
    out->push_back(static_cast<int>(v));
    at = comma + 1;
  }
  if (out->empty()) return InvalidArgument("elastic membership is empty");
  return Status::OK();
}

std::string FormatElasticWorkers(const std::vector<int>& workers) {
  std::string s;
  for (size_t i = 0; i < workers.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(workers[i]);
  }
  return s;
}

std::string FormatElasticAbsence(const ElasticAbsence& a) {
  return std::to_string(a.generation) + " " + FormatElasticWorkers(a.workers) + " " +
         std::to_string(a.waited_ms);
}

Status ParseElasticAbsence(const std::string& text, ElasticAbsence* out) {
  const size_t first = text.find(' ');
  const size_t last = text.rfind(' ');
  if (first == std::string::npos || last == first ||
      !Decimal(std::string_view(text).substr(0, first), INT32_MAX, &out->generation) ||
      !Decimal(std::string_view(text).substr(last + 1), INT64_MAX / 2, &out->waited_ms)) {
    return InvalidArgument("elastic absence \"" + text.substr(0, 200) +
                           "\" is not \"<generation> <worker ids> <milliseconds>\" (a runtime "
                           "of another version?)");
  }
  return ParseElasticWorkers(text.substr(first + 1, last - first - 1), &out->workers);
}

std::string ElasticFinishedKey() {
  return "elastic/finished";
}

std::string ElasticGenerationKey(int64_t generation) {
  return "elastic/gen/" + std::to_string(generation);
}

const char* RankKeyKindName(RankKeyKind kind) {
  switch (kind) {
    case RankKeyKind::kHost:
      return "host";
    case RankKeyKind::kStall:
      return "stall";
    case RankKeyKind::kAbort:
      return "abort";
    case RankKeyKind::kAbsent:
      return "absent";
    case RankKeyKind::kCommitted:
      return "committed";
  }
  return "?";
}

std::string RankKey(RankKeyKind kind, int rank) {
  return std::string(RankKeyKindName(kind)) + "/" + std::to_string(rank);
}

namespace {
std::string NcclScope(int set_id, uint64_t generation) {
  return "nccl/" + std::to_string(set_id) + "/" + std::to_string(generation) + "/";
}
}  // namespace

std::string NcclIdKey(int set_id, uint64_t generation) {
  return NcclScope(set_id, generation) + "id";
}

std::string NcclArrivedKey(int set_id, uint64_t generation, int rank) {
  return NcclScope(set_id, generation) + "arrived/" + std::to_string(rank);
}

std::string NcclAbortKey(int set_id, uint64_t generation) {
  return NcclScope(set_id, generation) + "abort";
}

std::string JobPrefixOf(std::string_view key) {
  if (key.substr(0, 4) != "job/") return "";
  const size_t slash = key.find('/', 4);
  return slash == std::string_view::npos ? "" : std::string(key.substr(0, slash + 1));
}

Status ParseRankKey(std::string_view key, RankKeyParts* out) {
  const std::string shown = "rendezvous key '" + std::string(key) + "'";
  const std::vector<std::string_view> parts = Split(key);
  if (parts.size() < 4 || parts[0] != "job" || parts[1].empty() || parts[2] != "attempt") {
    return InvalidArgument(shown + " is not under job/<id>/attempt/<n>/");
  }
  int64_t attempt = 0;
  if (!Decimal(parts[3], INT32_MAX, &attempt)) {
    return InvalidArgument(shown + ": the attempt '" + std::string(parts[3]) +
                           "' is not a decimal number");
  }
  if (parts.size() != 6) {
    return InvalidArgument(shown + " is not job/<id>/attempt/<n>/<kind>/<rank>");
  }
  RankKeyKind kind;
  if (parts[4] == "host") {
    kind = RankKeyKind::kHost;
  } else if (parts[4] == "stall") {
    kind = RankKeyKind::kStall;
  } else if (parts[4] == "abort") {
    kind = RankKeyKind::kAbort;
  } else if (parts[4] == "absent") {
    kind = RankKeyKind::kAbsent;
  } else if (parts[4] == "committed") {
    kind = RankKeyKind::kCommitted;
  } else {
    return InvalidArgument(shown + ": '" + std::string(parts[4]) +
                           "' is not a rank key's kind (host, stall, abort, absent or committed)");
  }
  int64_t rank = 0;
  if (!Decimal(parts[5], INT32_MAX, &rank)) {
    return InvalidArgument(shown + ": the rank '" + std::string(parts[5]) +
                           "' is not a decimal number");
  }
  out->job_id = std::string(parts[1]);
  out->attempt = attempt;
  out->kind = kind;
  out->rank = static_cast<int>(rank);
  return Status::OK();
}

std::string ElasticMeetingScope(std::string_view attempt_scope, int64_t generation, int session) {
  if (generation == 0 && session == 0) return std::string(attempt_scope);
  return std::string(attempt_scope) + "/elastic/" + std::to_string(generation) + "/init/" +
         std::to_string(session);
}

bool ParseElasticMeetingKey(std::string_view key, ElasticMeetingKeyParts* out) {
  const std::vector<std::string_view> parts = Split(key);
  int64_t attempt = 0, generation = 0, session = 0, index = 0;
  if (parts.size() != 10 || parts[0] != "job" || parts[1].empty() || parts[2] != "attempt" ||
      parts[4] != "elastic" || parts[6] != "init" || parts[8] != "host" ||
      !Decimal(parts[3], INT32_MAX, &attempt) || !Decimal(parts[5], INT64_MAX, &generation) ||
      !Decimal(parts[7], INT32_MAX, &session) || !Decimal(parts[9], INT32_MAX, &index)) {
    return false;
  }
  out->job_id = std::string(parts[1]);
  out->attempt = attempt;
  out->generation = generation;
  out->index = static_cast<int>(index);
  return true;
}

}  // namespace hvd::base
