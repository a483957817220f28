// Context's elastic calls after Init: the generation a program polls at its commits, and the
// commit note the launcher's shrinking waits for (launcherd/job_shrink.cc).
#include <chrono>
#include <vector>

#include "core/context.h"

namespace hvd::runtime::core {

// A restarted launcher forgets which workers committed: each says so again this often.
constexpr std::chrono::seconds kCommitNoteEvery{10};

Status Context::ElasticGeneration(int64_t* joined, int64_t* latest, bool* only_removed) {
  if (!elastic_) {
    return FailedPrecondition(
        "this is not an elastic job (start it with hvdrun --min-np/--max-np)");
  }
  *joined = membership_.generation;
  HVD_RETURN_IF_ERROR(LatestGeneration(*attempt_store_, std::chrono::steady_clock::now(), latest));
  *only_removed = false;
  if (*latest > *joined) {
    std::vector<int> newer;
    HVD_RETURN_IF_ERROR(GenerationWorkers(*attempt_store_, *latest, &newer));
    *only_removed = OnlyRemoved(membership_.workers, newer);
  }
  return Status::OK();
}

Status Context::ElasticCommitted() {
  if (!elastic_) {
    return FailedPrecondition(
        "this is not an elastic job (start it with hvdrun --min-np/--max-np)");
  }
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  const int64_t noted = committed_noted_ns_.load(std::memory_order_relaxed);
  if (noted != 0 && now - noted < std::chrono::nanoseconds(kCommitNoteEvery).count()) {
    return Status::OK();
  }
  // A failed write is logged by NoteCommitted and tried again at the next commit: the commit
  // itself succeeded, and only a shrink waits for this.
  if (NoteCommitted(*attempt_store_, membership_).ok()) {
    committed_noted_ns_.store(now, std::memory_order_relaxed);
  }
  return Status::OK();
}

}  // namespace hvd::runtime::core
