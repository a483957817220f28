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

// Data riding with a rank's ready bits: one operation's input, which the peers may reduce at
// once if every rank agrees to run that operation this round, saving the operation's own
// exchange (core/set_runner.cc decides what rides and when it is used). Only the direct
// exchange carries riders (at most kDirectAndMaxRanks ranks).
struct Rider {
  uint32_t tag = 0;    // what the data is (the runner's: cache slot + 1); 0: nothing rides
  uint32_t bytes = 0;  // REQUIRES: 0 < bytes <= kMaxRiderBytes where tag != 0
  const void* data = nullptr;
};
// What every rank sent: from[p] (this rank's own as it sent it), each peer's data at
// base + kMaxRiderBytes x p, in a per-thread area valid until this thread's next AndAllreduce.
struct Riders {
  std::vector<Rider> from;
  char* base = nullptr;  // null when no peer's data rode
};
// The most a rank accepts riding with another's bits; more is a protocol error.
constexpr size_t kMaxRiderBytes = 64 << 10;

// Bitwise AND of `bits` across ranks, in place. REQUIRES: same length on every rank.
// `mine`, when set, rides with this rank's bits; `theirs`, when set, gets every rank's riders
// (this rank's own as given; every peer's without a tag above kDirectAndMaxRanks ranks, where
// nothing rides).
Status AndAllreduce(const collectives::Comm& comm, std::vector<uint64_t>* bits,
                    const Rider* mine = nullptr, Riders* theirs = nullptr);

// Rank 0 receives every rank's `mine` into (*all)[rank] (its own included); other ranks send.
Status GatherToRoot(const collectives::Comm& comm, const std::string& mine,
                    std::vector<std::string>* all);

// Rank 0's *message is copied to every rank's *message.
Status BroadcastFromRoot(const collectives::Comm& comm, std::string* message);

}  // namespace hvd::runtime::negotiation
