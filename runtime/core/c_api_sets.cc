// The C ABI's process sets, elastic state and timeline (the rest: core/c_api.cc).
#include <cstdint>
#include <vector>

#include "core/c_api_status.h"
#include "hvd/c_api.h"
#include "hvd/hvd.h"

namespace {

int Report(const hvd::Status& s) {
  return hvd::internal::ReportToC(s);
}

}  // namespace

extern "C" {

int hvd_process_set_barrier(int process_set) {
  return Report(hvd::Barrier(process_set));
}
int hvd_process_set_join(int process_set, int* last_joined_rank) {
  return Report(hvd::Join(last_joined_rank, process_set));
}

int hvd_add_process_set(const int* ranks, int n, int* id) {
  if (n < 0 || (n > 0 && ranks == nullptr)) {
    return Report(hvd::InvalidArgument("hvd_add_process_set: ranks is NULL or n is negative"));
  }
  return Report(hvd::AddProcessSet(std::vector<int>(ranks, ranks + n), id));
}
int hvd_remove_process_set(int id) {
  return Report(hvd::RemoveProcessSet(id));
}
int hvd_process_set_rank(int id) {
  return hvd::ProcessSetRank(id);
}
int hvd_process_set_size(int id) {
  return hvd::ProcessSetSize(id);
}
int hvd_process_set_included(int id) {
  return hvd::ProcessSetIncluded(id) ? 1 : 0;
}
int hvd_process_set_ranks(int id, int* ranks, int max) {
  std::vector<int> r;
  hvd::Status s = hvd::ProcessSetRanks(id, &r);
  Report(s);
  if (!s.ok()) return -1;
  for (int i = 0; i < max && i < static_cast<int>(r.size()) && ranks != nullptr; ++i) {
    ranks[i] = r[i];
  }
  return static_cast<int>(r.size());
}
int hvd_process_set_ids(int* ids, int max) {
  const std::vector<int> all = hvd::ProcessSetIds();
  for (int i = 0; i < max && i < static_cast<int>(all.size()) && ids != nullptr; ++i) {
    ids[i] = all[i];
  }
  return static_cast<int>(all.size());
}

int hvd_elastic_enabled(void) {
  return hvd::IsElastic() ? 1 : 0;
}

int hvd_elastic_generation(int64_t* joined, int64_t* latest, int* only_removed) {
  hvd::ElasticGenerationInfo info;
  const int code = Report(hvd::ElasticGeneration(&info));
  if (code == 0) {
    if (joined) *joined = info.joined;
    if (latest) *latest = info.latest;
    if (only_removed) *only_removed = info.only_removed ? 1 : 0;
  }
  return code;
}

int hvd_elastic_committed(void) {
  return Report(hvd::ElasticCommitted());
}

int hvd_start_timeline(const char* path, int mark_cycles) {
  if (path == nullptr) return Report(hvd::InvalidArgument("hvd_start_timeline: path is NULL"));
  return Report(hvd::StartTimeline(path, mark_cycles != 0));
}
int hvd_stop_timeline(void) {
  return Report(hvd::StopTimeline());
}

}  // extern "C"
