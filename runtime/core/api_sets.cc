// The process-set and timeline parts of the public API (hvd/hvd.h), over the engine's table.
#include <algorithm>

#include "base/mutex.h"
#include "core/api_internal.h"
#include "core/context.h"
#include "hvd/hvd.h"

namespace hvd {

using internal::Current;
using internal::NewOp;
using internal::NotFromCallback;
using internal::Submit;
using runtime::core::Context;
using runtime::negotiation::OpType;

// ---- Timeline ---------------------------------------------------------------------------------

Status StartTimeline(const std::string& path, bool mark_cycles) {
  auto ctx = Current();
  if (!ctx) return FailedPrecondition("start_timeline: " + internal::NotInitialized());
  return ctx->engine().timeline()->Start(path, mark_cycles).WithContext("start_timeline");
}

Status StopTimeline() {
  auto ctx = Current();
  if (!ctx) return FailedPrecondition("stop_timeline: " + internal::NotInitialized());
  return ctx->engine().timeline()->Stop().WithContext("stop_timeline");
}

// ---- Process sets -----------------------------------------------------------------------------

namespace {
// AddProcessSet and RemoveProcessSet share one key per kind: one change at a time per process.
base::Mutex g_set_change_mu;

Status ChangeSets(std::shared_ptr<internal::Operation> op, const char* fn) {
  HVD_RETURN_IF_ERROR(NotFromCallback(fn));
  std::shared_ptr<Context> ctx = Current();
  if (!ctx) {
    return FailedPrecondition(std::string(fn) + ": " + internal::NotInitialized());
  }
  if (!ctx->engine().dynamic_process_sets()) {
    return FailedPrecondition(std::string(fn) +
                              ": process sets can only change after init when dynamic process "
                              "sets are enabled: set HVD_DYNAMIC_PROCESS_SETS=1 (or "
                              "HOROVOD_DYNAMIC_PROCESS_SETS=1) on every rank, or pass the sets to "
                              "init");
  }
  base::MutexLock lock(&g_set_change_mu);
  return Submit(op).Wait().WithContext(fn);
}
}  // namespace

Status AddProcessSet(const std::vector<int>& ranks, int* id) {
  auto op = NewOp(OpType::kAddProcessSet, "__add_process_set__", {});
  // Sorted as Horovod sorts them; ranks are checked on every rank alike when the change applies
  // (a rank that failed here alone would leave the others waiting).
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  op->request.splits.assign(sorted.begin(), sorted.end());
  HVD_RETURN_IF_ERROR(ChangeSets(op, "hvd::AddProcessSet"));
  if (id != nullptr) *id = op->result_id;
  return Status::OK();
}

Status RemoveProcessSet(int id) {
  auto op = NewOp(OpType::kRemoveProcessSet, "__remove_process_set__", {});
  op->request.root = id;
  return ChangeSets(op, "hvd::RemoveProcessSet");
}

int ProcessSetRank(int id) {
  auto ctx = Current();
  std::vector<int> ranks;
  if (!ctx || !ctx->engine().process_sets().Get(id, &ranks)) return -1;
  auto it = std::lower_bound(ranks.begin(), ranks.end(), ctx->topology().rank);
  return it != ranks.end() && *it == ctx->topology().rank ? static_cast<int>(it - ranks.begin())
                                                          : -1;
}

int ProcessSetSize(int id) {
  auto ctx = Current();
  std::vector<int> ranks;
  if (!ctx || !ctx->engine().process_sets().Get(id, &ranks)) return -1;
  return static_cast<int>(ranks.size());
}

bool ProcessSetIncluded(int id) {
  return ProcessSetRank(id) >= 0;
}

Status ProcessSetRanks(int id, std::vector<int>* ranks) {
  auto ctx = Current();
  if (!ctx) return FailedPrecondition(internal::NotInitialized());
  if (!ctx->engine().process_sets().Get(id, ranks)) {
    return NotFound("process set " + std::to_string(id) + " does not exist (registered: " +
                    ctx->engine().process_sets().DescribeIds() + ")");
  }
  return Status::OK();
}

std::vector<int> ProcessSetIds() {
  auto ctx = Current();
  return ctx ? ctx->engine().process_sets().Ids() : std::vector<int>{};
}

}  // namespace hvd
