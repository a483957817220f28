// The NCCL unique-id exchange: how the ranks of one process set agree on an ncclUniqueId through
// the rendezvous store before ncclCommInitRank.
//
// NCCL needs every rank of a communicator to hold the same 128-byte id, created by one of them
// (ncclGetUniqueId). The launcher's rendezvous store already connects every rank, so rank 0 of the
// set writes the id there and the others wait for it, with a deadline and an abort key so that a
// failed or absent rank 0 turns into a clear error instead of a hang. Nothing here touches CUDA or
// NCCL: the id is an opaque blob made by the caller's `make_id`, which keeps this testable on
// hosts without a GPU.
//
// Keys (base/rendezvous_keys.h, docs/rendezvous.md "NCCL communicators"), under the store the
// caller passes, which is already scoped to the job and attempt (rendezvous::NewPrefixStore):
//   nccl/<set>/<gen>/arrived/<rank>   each set rank, on entering the exchange (value: its job rank)
//   nccl/<set>/<gen>/id               the set's rank 0: the id's raw 128 bytes
//   nccl/<set>/<gen>/abort            any rank giving the communicator up: the reason
// <gen> is the communicator's generation: a set whose communicator is rebuilt (after an abort, a
// re-Init) uses a new one, so it never reads the previous communicator's id.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hvd/status.h"
#include "rendezvous/store.h"

namespace hvd::runtime::gpu {

// sizeof(ncclUniqueId) (NCCL_UNIQUE_ID_BYTES), stable across NCCL 2.x.
inline constexpr size_t kNcclIdBytes = 128;

// One rank's part in one communicator's exchange.
struct NcclIdExchange {
  int set_id = 0;  // the process set's id (0: the global set; -1 - h: host h's, hierarchical)
  uint64_t generation = 0;  // the set's communicator generation (see above)
  int rank = 0;             // this rank within the set
  int size = 1;             // the set's size
  // The job rank of each set rank, for messages ("rank 0 (job rank 4)"); empty: the same numbers.
  std::vector<int> job_ranks;
  // How long a rank other than 0 waits for the id.
  std::chrono::milliseconds timeout{30000};
};

// Every rank writes its arrived key. Rank 0 then calls `make_id` (which must yield exactly
// kNcclIdBytes bytes, else InvalidArgument), writes the id key and returns the id; when `make_id`
// fails, rank 0 also writes the abort key with the reason so the others fail at once. The other
// ranks wait for the id key in slices of at most 100 ms, and between slices check:
//   - the abort key: Aborted with the reason written there;
//   - `cancelled` (may be empty): its non-OK status is returned as is (shutdown, a peer failure);
//   - the deadline: DeadlineExceeded naming rank 0 (and its job rank), the store, the timeout
//     and how long this rank waited.
// An id of another size is refused (InvalidArgument naming the key). A store error other than a
// slice's timeout is returned with the key as context.
Status ExchangeNcclId(rendezvous::Store& store, const NcclIdExchange& x,
                      const std::function<Status(std::string*)>& make_id,
                      const std::function<Status()>& cancelled, std::string* id);

// Writes the abort key of one exchange with `reason`: every rank waiting on it (or entering it
// later) fails with Aborted carrying the reason. Any rank may call it, any number of times.
Status AbortNcclExchange(rendezvous::Store& store, int set_id, uint64_t generation,
                         const std::string& reason);

// The set ranks (ascending) whose arrived key is absent: after ncclCommInitRank timed out, the
// ranks that never reached the communicator's setup.
Status MissingNcclRanks(rendezvous::Store& store, const NcclIdExchange& x,
                        std::vector<int>* missing);

// "rank 3 (job rank 7) never arrived", "ranks 1, 3 (job ranks 5, 7) never arrived"; the job
// ranks are left out when `job_ranks` is empty or equal to the set ranks. "every rank arrived"
// when `missing` is empty.
std::string DescribeMissingRanks(const std::vector<int>& missing,
                                 const std::vector<int>& job_ranks);

}  // namespace hvd::runtime::gpu
