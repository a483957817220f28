// The negotiation's own small collectives, run by the background thread every cycle over the
// same transport as the data (all ranks run them in the same order, so they cannot interleave
// with data on a link):
//   - AndAllreduce: the cache bit vector and flags (one small message from each rank to every
//     other per cycle up to kDirectAndMaxRanks ranks, else through rank 0);
//   - GatherToRoot / BroadcastFromRoot: the slow path's request lists to rank 0 and its response
//     list back. Messages are framed as a u64 length followed by the bytes.
// Rank 0 gathers and answers directly: the vectors are a few hundred bytes, so the two hops of a
// star beat the 2(N-1) hops of a ring for the job sizes this targets (tens of ranks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "hvd/status.h"

namespace hvd::runtime::negotiation {

// Up to this many ranks AndAllreduce exchanges directly (every rank with every other, one
// message latency); above it, through rank 0 (two latencies, 2(N-1) messages in all).
constexpr int kDirectAndMaxRanks = 8;

// Bitwise AND of `bits` across ranks, in place. REQUIRES: same length on every rank.
Status AndAllreduce(const collectives::Comm& comm, std::vector<uint64_t>* bits);

// Rank 0 receives every rank's `mine` into (*all)[rank] (its own included); other ranks send.
Status GatherToRoot(const collectives::Comm& comm, const std::string& mine,
                    std::vector<std::string>* all);

// Rank 0's *message is copied to every rank's *message.
Status BroadcastFromRoot(const collectives::Comm& comm, std::string* message);

}  // namespace hvd::runtime::negotiation
