#include "gpu/nccl_bootstrap.h"

#include <algorithm>

#include "base/rendezvous_keys.h"

namespace hvd::runtime::gpu {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Long enough that a waiting rank costs the store little (one wait request per slice), short
// enough that an abort or a cancellation is seen within about this long.
constexpr milliseconds kSlice(100);

std::string Quoted(const std::string& key) {
  return "'" + key + "'";
}

// "rank 0 (job rank 4)", or "rank 0" when the job rank is the same number or unknown.
std::string RankName(int rank, const std::vector<int>& job_ranks) {
  std::string s = "rank " + std::to_string(rank);
  if (rank >= 0 && static_cast<size_t>(rank) < job_ranks.size() && job_ranks[rank] != rank) {
    s += " (job rank " + std::to_string(job_ranks[rank]) + ")";
  }
  return s;
}

std::string SetName(const NcclIdExchange& x) {
  // Negative ids: a host's own communicator of the hierarchical allreduce (docs/rendezvous.md).
  const std::string whose = x.set_id >= 0 ? "process set " + std::to_string(x.set_id)
                                          : "host " + std::to_string(-1 - x.set_id);
  return whose + "'s NCCL communicator (generation " + std::to_string(x.generation) + ")";
}

Status CheckExchange(const NcclIdExchange& x) {
  if (x.size < 1 || x.rank < 0 || x.rank >= x.size) {
    return InvalidArgument("NCCL id exchange: rank " + std::to_string(x.rank) + " of size " +
                           std::to_string(x.size) + " is not a rank of the set (a bug in hvd)");
  }
  if (!x.job_ranks.empty() && x.job_ranks.size() != static_cast<size_t>(x.size)) {
    return InvalidArgument("NCCL id exchange: " + std::to_string(x.job_ranks.size()) +
                           " job ranks given for a set of " + std::to_string(x.size) +
                           " (a bug in hvd)");
  }
  return Status::OK();
}

int JobRank(const NcclIdExchange& x) {
  return x.job_ranks.empty() ? x.rank : x.job_ranks[x.rank];
}

Status CheckId(const std::string& id, const std::string& key, const std::string& who) {
  if (id.size() == kNcclIdBytes) return Status::OK();
  return InvalidArgument(who + ": the NCCL unique id at " + Quoted(key) + " is " +
                         std::to_string(id.size()) + " bytes, not " + std::to_string(kNcclIdBytes) +
                         " (another program writing under this job's keys, or ranks built "
                         "against different NCCL headers)");
}

// Rank 0: makes the id and publishes it, or tells the others why it could not.
Status PublishId(rendezvous::Store& store, const NcclIdExchange& x,
                 const std::function<Status(std::string*)>& make_id, std::string* id) {
  const std::string key = base::NcclIdKey(x.set_id, x.generation);
  std::string made;
  Status s = make_id ? make_id(&made)
                     : InvalidArgument("no function to create the NCCL unique id (a bug in hvd)");
  if (s.ok()) s = CheckId(made, key, "rank 0 of " + SetName(x));
  if (!s.ok()) {
    s = s.WithContext("rank 0 of " + SetName(x) + " could not create the NCCL unique id");
    // Best effort: the others then fail at once with this reason instead of at their deadline.
    (void)AbortNcclExchange(store, x.set_id, x.generation, s.message());
    return s;
  }
  HVD_RETURN_IF_ERROR_CTX(store.Set(key, made), "publishing the NCCL unique id at " + Quoted(key) +
                                                    " in " + store.Describe());
  *id = std::move(made);
  return Status::OK();
}

// The abort key's reason as an error, OK when the key is absent.
Status AbortedBy(rendezvous::Store& store, const NcclIdExchange& x) {
  const std::string key = base::NcclAbortKey(x.set_id, x.generation);
  std::string reason;
  Status s = store.Get(key, &reason);
  if (s.code() == StatusCode::kNotFound) return Status::OK();
  if (!s.ok()) return s.WithContext("reading " + Quoted(key) + " in " + store.Describe());
  return Aborted(SetName(x) + " was given up: " + reason);
}

}  // namespace

Status ExchangeNcclId(rendezvous::Store& store, const NcclIdExchange& x,
                      const std::function<Status(std::string*)>& make_id,
                      const std::function<Status()>& cancelled, std::string* id) {
  HVD_RETURN_IF_ERROR(CheckExchange(x));
  const auto start = Clock::now();
  const std::string arrived = base::NcclArrivedKey(x.set_id, x.generation, x.rank);
  HVD_RETURN_IF_ERROR_CTX(store.Set(arrived, std::to_string(JobRank(x))),
                          "writing " + Quoted(arrived) + " in " + store.Describe());
  // An exchange given up before this rank came (a peer failed early) fails here too, rank 0
  // included: it must not publish an id nobody will use.
  HVD_RETURN_IF_ERROR(AbortedBy(store, x));
  if (x.rank == 0) return PublishId(store, x, make_id, id);

  const std::string key = base::NcclIdKey(x.set_id, x.generation);
  const auto deadline = start + x.timeout;
  for (;;) {
    if (cancelled) HVD_RETURN_IF_ERROR(cancelled());
    const auto now = Clock::now();
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - now);
    Status s = store.Wait({key}, std::clamp(left, milliseconds(0), kSlice));
    if (s.ok()) {
      std::string value;
      HVD_RETURN_IF_ERROR_CTX(store.Get(key, &value),
                              "reading " + Quoted(key) + " in " + store.Describe());
      HVD_RETURN_IF_ERROR(CheckId(value, key, RankName(x.rank, x.job_ranks) + " of " + SetName(x)));
      *id = std::move(value);
      return Status::OK();
    }
    if (s.code() != StatusCode::kDeadlineExceeded) {
      return s.WithContext(RankName(x.rank, x.job_ranks) + " of " + SetName(x) + " waiting for " +
                           Quoted(key));
    }
    HVD_RETURN_IF_ERROR(AbortedBy(store, x));
    if (Clock::now() >= deadline) {
      const auto waited = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
      return DeadlineExceeded(
          RankName(x.rank, x.job_ranks) + " of " + SetName(x) + ": " + RankName(0, x.job_ranks) +
          " did not publish the NCCL unique id " + Quoted(key) + " in " + store.Describe() +
          " within " + std::to_string(x.timeout.count()) + " ms (waited " +
          std::to_string(waited.count()) + " ms). Check " + RankName(0, x.job_ranks) +
          "'s log: it failed or is stuck before creating the communicator, or it never joined "
          "this process set");
    }
  }
}

Status AbortNcclExchange(rendezvous::Store& store, int set_id, uint64_t generation,
                         const std::string& reason) {
  const std::string key = base::NcclAbortKey(set_id, generation);
  HVD_RETURN_IF_ERROR_CTX(store.Set(key, reason.empty() ? "no reason given" : reason),
                          "writing " + Quoted(key) + " in " + store.Describe());
  return Status::OK();
}

Status MissingNcclRanks(rendezvous::Store& store, const NcclIdExchange& x,
                        std::vector<int>* missing) {
  missing->clear();
  if (x.size < 1)
    return InvalidArgument("MissingNcclRanks: a set of size " + std::to_string(x.size) +
                           " (a bug in hvd)");
  for (int r = 0; r < x.size; ++r) {
    const std::string key = base::NcclArrivedKey(x.set_id, x.generation, r);
    std::string value;
    Status s = store.Get(key, &value);
    if (s.code() == StatusCode::kNotFound) {
      missing->push_back(r);
    } else if (!s.ok()) {
      return s.WithContext("reading " + Quoted(key) + " in " + store.Describe());
    }
  }
  return Status::OK();
}

std::string DescribeMissingRanks(const std::vector<int>& missing,
                                 const std::vector<int>& job_ranks) {
  if (missing.empty()) return "every rank arrived";
  std::string ranks;
  std::string jobs;
  bool differ = false;
  for (size_t i = 0; i < missing.size(); ++i) {
    const int r = missing[i];
    const bool known = r >= 0 && static_cast<size_t>(r) < job_ranks.size();
    const int job = known ? job_ranks[r] : r;
    differ = differ || job != r;
    if (i > 0) {
      ranks += ", ";
      jobs += ", ";
    }
    ranks += std::to_string(r);
    jobs += known ? std::to_string(job) : std::string("?");
  }
  const char* plural = missing.size() == 1 ? "rank " : "ranks ";
  std::string s = plural + ranks;
  if (differ) s += std::string(" (job ") + plural + jobs + ")";
  return s + " never arrived";
}

}  // namespace hvd::runtime::gpu
