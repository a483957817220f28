// Settings that every rank of a job must share: those declared with base::kSameOnEveryRank
// (base/settings.h).
//
// Some settings shape the collectives themselves: the fusion plan (which tensors share a buffer),
// the algorithm chosen per size, the ring's chunking, shared memory or TCP between local peers,
// the response cache's slots. Ranks that disagree on one would run different plans and exchange
// mismatched bytes, which ends in wrong results or a hang until the peer timeout. Each rank
// therefore publishes its values with its rendezvous record, and Init fails on every rank,
// naming the setting, the two ranks and their values, when they differ.
#pragma once

#include <string>

#include "hvd/status.h"

namespace hvd::runtime::core {

// This process's values in name order, normalized ("HVD_CACHE_CAPACITY=1024 ... HVD_SHM=1"): an
// unset variable counts as its default, and "true" equals "1", so only real differences show.
// InvalidArgument when a value does not parse (naming the variable).
Status JobWideSettings(std::string* out);

// OK when `theirs` (rank their_rank's JobWideSettings) equals `mine`; otherwise InvalidArgument
// naming the first setting that differs, both ranks and both values.
Status CompareJobWideSettings(const std::string& mine, int my_rank, const std::string& theirs,
                              int their_rank);

}  // namespace hvd::runtime::core
