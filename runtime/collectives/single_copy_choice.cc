#include "collectives/single_copy_choice.h"

#include <algorithm>
#include <bit>
#include <string>

#include "base/logging.h"
#include "collectives/collectives.h"

namespace hvd::runtime::collectives {
namespace {

int ClassOf(size_t bytes) {
  return bytes == 0 ? 0 : 63 - std::countl_zero(uint64_t{bytes});
}

// Whether a decision follows the c-th allreduce of a class (c counted from 1).
bool DecisionAfter(uint64_t c) {
  return c >= 2 && (c <= 16 ? std::has_single_bit(c) : c % 16 == 0);
}

}  // namespace

bool SingleCopyChoice::Next(size_t bytes) const {
  base::MutexLock lock(&mu_);
  const Class& k = classes_[ClassOf(bytes)];
  const uint64_t c = k.count + 1;
  const bool probe = DecisionAfter(c) && (k.close || c % 64 == 0);
  return k.single_copy != probe;  // the probe runs the other one
}

Status SingleCopyChoice::Done(const Comm& comm, size_t bytes, bool single_copy,
                              std::chrono::nanoseconds took) {
  uint8_t vote = 0;
  double ring = 0, single = 0;
  {
    base::MutexLock lock(&mu_);
    Class& k = classes_[ClassOf(bytes)];
    const int a = single_copy ? 1 : 0;
    double& est = k.ns_per_byte[a];
    const double sample = static_cast<double>(took.count()) / static_cast<double>(bytes);
    // The algorithm chosen: a running average that follows a change of phase within a few
    // samples. A probe replaces its estimate: it is the one recent sample of that algorithm, and
    // the earlier one may be from another phase or a cold start (first-touch faults, cold
    // caches: measured 5-10x a warm operation's time).
    const bool probe = single_copy != k.single_copy;
    est = est == 0.0 || probe ? sample : 0.5 * est + 0.5 * sample;
    if (k.samples[a] < 2) ++k.samples[a];
    if (!DecisionAfter(++k.count)) return Status::OK();
    ring = k.ns_per_byte[0];
    single = k.ns_per_byte[1];
    const bool single_copy_wins = single > 0.0 && (ring == 0.0 || single < ring);
    // Until each has been timed twice (once warm), or while they are within 2x: probe on.
    const bool close =
        k.samples[0] < 2 || k.samples[1] < 2 || std::max(ring, single) < 2 * std::min(ring, single);
    vote = (single_copy_wins ? 1 : 0) | (close ? 2 : 0);
  }
  // Only rank 0's vote (bit 0: the single copy, bit 1: close) counts; the lock is not held across
  // the message.
  HVD_RETURN_IF_ERROR(Broadcast(comm, &vote, 1, 0).WithContext("single-copy choice"));
  if (comm.rank() == 0) {
    const size_t from = size_t{1} << ClassOf(bytes);
    std::string on = "the job's " + std::to_string(comm.size()) + " ranks";
    if (comm.job_ranks != nullptr) {
      on = "the process set of job ranks";
      for (int r : *comm.job_ranks) on += " " + std::to_string(r);
    }
    HVD_LOG(DEBUG) << "on " << on << ", allreduces of " << from << " to " << 2 * from - 1
                   << " bytes: " << ((vote & 1) != 0 ? "single copy" : "ring") << " (ring " << ring
                   << " ns/byte, single copy " << single << ")";
  }
  base::MutexLock lock(&mu_);
  classes_[ClassOf(bytes)].single_copy = (vote & 1) != 0;
  classes_[ClassOf(bytes)].close = (vote & 2) != 0;
  return Status::OK();
}

}  // namespace hvd::runtime::collectives
