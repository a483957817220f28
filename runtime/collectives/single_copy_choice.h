// Chooses, per size, between the ring and the single-copy allreduce by how long each takes on
// this machine now. Neither always wins: where two cores share a cache, the ring's hand-off of
// each chunk from one core's cache to the other's is cheap and it is 2-4x faster than the single
// copy; where moving a dirty cache line between the cores is slow (the same VM in another phase,
// docs/performance-api.md), the single copy is 2-3x faster than the ring. Internal to collectives/.
//
// Vocabulary:
//   class     - the allreduces whose byte counts lie between the same powers of two; the choice
//               is made per class.
//   count c   - how many allreduces of the class the communicator has run: the same on every
//               rank, since every rank runs the same collectives in the same order.
//   decision  - after the c-th allreduce of a class for c = 2, 4, 8, 16 and every 16th after
//               that, rank 0 broadcasts which algorithm its own measurements favour (the lower
//               average time per byte) and every rank takes it: the choice is the same everywhere
//               without a message on the other operations (a byte every 16 operations of 256 KiB
//               or more). The algorithm chosen is timed on every operation, so when the machine
//               turns slow for it the next decision, within 16 operations, leaves it.
//   probe     - the allreduce just before a decision may run the algorithm not chosen, so that
//               its time is measured again (a phase of the machine can also make it the faster):
//               every 64th allreduce always, and before every decision while either has been
//               timed fewer than twice or the two times lie within 2x of each other (rank 0 says
//               so with its choice), so that a clear winner is not paid for with probes. A probe's
//               time replaces its algorithm's estimate (a first, cold operation takes 5-10x a
//               warm one). The first two allreduces of a class run the ring, then the single
//               copy.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "hvd/status.h"

namespace hvd::runtime::collectives {

struct Comm;

class SingleCopyChoice {
 public:
  SingleCopyChoice() = default;
  SingleCopyChoice(const SingleCopyChoice&) = delete;
  SingleCopyChoice& operator=(const SingleCopyChoice&) = delete;

  // Whether the next allreduce of `bytes` takes the single copy. No messages; does not count.
  bool Next(size_t bytes) const;

  // Counts an allreduce of `bytes` that ran the single copy or not and took `took` on this rank;
  // at a decision, rank 0 broadcasts its choice (collective then: every rank calls Done for the
  // same operations in the same order).
  Status Done(const Comm& comm, size_t bytes, bool single_copy, std::chrono::nanoseconds took);

 private:
  struct Class {
    uint64_t count = 0;
    bool single_copy = false;            // the choice
    bool close = true;                   // the times are within 2x: probe before each decision
    double ns_per_byte[2] = {0.0, 0.0};  // [ring, single copy]; 0: not measured yet
    uint32_t samples[2] = {0, 0};        // times each was timed, up to 2
  };
  static constexpr int kClasses = 64;

  mutable base::Mutex mu_;
  Class classes_[kClasses] HVD_GUARDED_BY(mu_);
};

}  // namespace hvd::runtime::collectives
