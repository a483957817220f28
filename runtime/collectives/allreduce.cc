// Allreduce dispatcher: validates arguments, chooses the algorithm, and turns kAverage into a sum
// followed by Scale(1/size).
//
// Choice (the same on every rank: it depends on sizes and placement, and between the ring and the
// single copy on times that rank 0 measured and broadcast):
//   hierarchical - the job spans hosts with equal numbers of ranks (Comm::hierarchy);
//   direct       - otherwise, when each rank would send at most Comm::direct_max_bytes on it,
//                  (size - 1) x the buffer: the latency path;
//   single copy  - otherwise, from Comm::single_copy_min_bytes up (ranks of one host that may
//                  read each other's memory; EnableSingleCopy made that choice on every rank),
//                  where Comm::single_copy_choice measured it faster than the ring (if set);
//   ring         - otherwise.
// All four reduce every element in the same order (collectives.h), so the choice never changes
// a result. AllreduceExtents (a buffer in several places) runs only where the choice is rings
// (ExtentsTake): the flat ring, or the hierarchical allreduce's large buffers' path. Special cases:
// count 0 is a no-op on every rank; with one rank the data is already the result and only
// kAverage's scaling (by 1, exact) runs.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string>

#include "collectives/collectives.h"
#include "collectives/pipeline.h"
#include "collectives/reduce.h"
#include "collectives/single_copy_choice.h"
#include "transport/group.h"

namespace hvd::runtime::collectives {

Comm Comm::Over(transport::Transport* t) const {
  Comm c = *this;
  c.transport = t;
  c.hierarchy = nullptr;
  c.job_ranks = nullptr;  // the caller knows what the view's ranks are
  c.gathered = nullptr;
  // Another communicator counts its own allreduces (every rank of it the same).
  if (c.single_copy_choice != nullptr) c.single_copy_choice = std::make_shared<SingleCopyChoice>();
  return c;
}

Comm Comm::OverLocal() const {
  Comm c = Over(hierarchy->local.get());
  c.direct_max_bytes = hierarchy->local_direct_max_bytes;
  if (hierarchy->local_ring_chunk_bytes > 0) c.ring_chunk_bytes = hierarchy->local_ring_chunk_bytes;
  c.ring_lookahead_chunks = 0;  // within a host: forward each chunk while it is in cache
  return c;
}

Comm Comm::OverCross() const {
  Comm c = Over(hierarchy->cross.get());
  c.direct_max_bytes = hierarchy->cross_direct_max_bytes;
  if (hierarchy->cross_ring_chunk_bytes > 0) c.ring_chunk_bytes = hierarchy->cross_ring_chunk_bytes;
  c.ring_lookahead_chunks = hierarchy->cross_ring_lookahead_chunks;
  return c;
}

std::shared_ptr<Hierarchy> MakeHierarchy(transport::Transport* t,
                                         const std::vector<std::string>& hosts,
                                         size_t local_direct_max_bytes,
                                         size_t cross_direct_max_bytes) {
  if (hosts.size() != static_cast<size_t>(t->size())) return nullptr;
  // Ranks per host in rank order, hosts in order of their lowest rank.
  std::map<std::string, std::vector<int>> by_host;
  std::vector<std::string> order;
  for (size_t r = 0; r < hosts.size(); ++r) {
    if (by_host[hosts[r]].empty()) order.push_back(hosts[r]);
    by_host[hosts[r]].push_back(static_cast<int>(r));
  }
  const size_t local_size = by_host[hosts[0]].size();
  if (order.size() < 2 || local_size < 2) return nullptr;  // one host, or one rank per host
  for (const auto& [host, ranks] : by_host) {
    if (ranks.size() != local_size) return nullptr;
  }
  const std::vector<int>& mine = by_host[hosts[t->rank()]];
  const size_t l = std::find(mine.begin(), mine.end(), t->rank()) - mine.begin();
  std::vector<int> cross;
  for (const std::string& h : order) cross.push_back(by_host[h][l]);
  std::sort(cross.begin(), cross.end());
  auto h = std::make_shared<Hierarchy>();
  h->local = transport::NewGroupView(t, mine);
  h->cross = transport::NewGroupView(t, cross);
  h->local_direct_max_bytes = local_direct_max_bytes;
  h->cross_direct_max_bytes = cross_direct_max_bytes;
  return h;
}

std::vector<size_t> AllreduceLayout(const Comm& comm, size_t count) {
  std::vector<size_t> parts;
  AllreduceLayout(comm, count, &parts);
  return parts;
}

void AllreduceLayout(const Comm& comm, size_t count, std::vector<size_t>* parts) {
  if (comm.hierarchy == nullptr) {
    internal::SplitEvenly(count, comm.size(), parts);  // the ring's segments
    return;
  }
  const int nl = comm.hierarchy->local->size(), nh = comm.hierarchy->cross->size();
  const std::vector<size_t> local = RingSegments(count, nl);
  parts->assign(1, 0);
  for (int t = 0; t < nl; ++t) {
    const std::vector<size_t> cross = RingSegments(local[t + 1] - local[t], nh);
    for (int u = 1; u <= nh; ++u) parts->push_back(local[t] + cross[u]);
  }
}

namespace {

enum class Algorithm { kRing, kDirect, kHierarchical, kSingleCopy };

// Whether the single copy may take `bytes` (else the ring does, where neither earlier path does).
bool SingleCopySize(const Comm& comm, size_t bytes) {
  return comm.single_copy_min_bytes != 0 && bytes >= comm.single_copy_min_bytes;
}

Algorithm Choose(const Comm& comm, size_t bytes) {
  if (comm.hierarchy != nullptr) return Algorithm::kHierarchical;
  if (UseDirect(comm, bytes)) return Algorithm::kDirect;
  if (SingleCopySize(comm, bytes) &&
      (comm.single_copy_choice == nullptr || comm.single_copy_choice->Next(bytes))) {
    return Algorithm::kSingleCopy;
  }
  return Algorithm::kRing;
}

// The ring and the single copy: the choice between them may be measured.
bool RingOrSingleCopy(Algorithm a) {
  return a == Algorithm::kRing || a == Algorithm::kSingleCopy;
}

// The algorithms that read an out-of-place input themselves (the hierarchical one gets it copied
// to the output first).
bool ReadsInput(Algorithm a) {
  return a != Algorithm::kHierarchical;
}

// What AllreduceParts and AllreduceExtents check first.
Status CheckArguments(const Comm& comm, const std::vector<size_t>& parts, DataType dtype,
                      ReduceOp op) {
  if (comm.transport == nullptr) return InvalidArgument("allreduce: no transport");
  if (!IsValid(dtype)) {
    return InvalidArgument("allreduce: invalid dtype " + std::to_string(static_cast<int>(dtype)));
  }
  if (!IsValid(op)) {
    return InvalidArgument("allreduce: invalid reduce op " + std::to_string(static_cast<int>(op)));
  }
  if (parts.empty()) return InvalidArgument("allreduce: no part boundaries");
  return Status::OK();
}

}  // namespace

bool UseDirect(const Comm& comm, size_t bytes) {
  return comm.size() > 1 && bytes <= comm.direct_max_bytes / static_cast<size_t>(comm.size() - 1);
}

bool ExtentsTake(const Comm& comm, size_t count, DataType dtype) {
  const size_t bytes = count * DataTypeSize(dtype);
  if (comm.size() <= 1) return false;
  if (comm.hierarchy == nullptr) return !UseDirect(comm, bytes) && !SingleCopySize(comm, bytes);
  // HierarchicalAllreduce's large buffers' path (its cross step takes extents either way).
  return !(UseDirect(comm.OverLocal(), bytes) && UseDirect(comm.OverCross(), bytes));
}

const char* AllreduceAlgorithm(const Comm& comm, size_t bytes) {
  static const char* const kNames[] = {"ring", "direct", "hierarchical", "single-copy"};
  return kNames[static_cast<int>(Choose(comm, bytes))];
}

Status AllreduceParts(const Comm& comm, void* buf, const std::vector<size_t>& parts, DataType dtype,
                      ReduceOp op, double postscale) {
  return AllreduceParts(comm, nullptr, buf, parts, dtype, op, postscale);
}

Status AllreduceParts(const Comm& comm, const void* in, void* buf, const std::vector<size_t>& parts,
                      DataType dtype, ReduceOp op, double postscale) {
  HVD_RETURN_IF_ERROR(CheckArguments(comm, parts, dtype, op));
  const size_t count = parts.back();
  if (count == 0) return Status::OK();
  if (buf == nullptr) return InvalidArgument("allreduce: null buffer for a non-empty tensor");

  const size_t bytes = count * DataTypeSize(dtype);
  const Algorithm algorithm = comm.size() > 1 ? Choose(comm, bytes) : Algorithm::kDirect;
  if (comm.gathered != nullptr && algorithm != Algorithm::kDirect) {
    return Internal("allreduce: the inputs of " + std::to_string(bytes) +
                    " bytes came with the negotiation, but they take the " +
                    AllreduceAlgorithm(comm, bytes) + " path");
  }
  if (in != nullptr && in != buf && (comm.size() == 1 || !ReadsInput(algorithm))) {
    std::memcpy(buf, in, bytes);
    in = nullptr;
  }
  const ReduceOp sum_op = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
  // One factor, so that every element is rounded once whichever algorithm runs.
  double factor = postscale;
  if (op == ReduceOp::kAverage) factor = factor / comm.size();
  if (comm.size() > 1) {
    // Both candidates are timed where the choice between them is measured.
    const bool measured = comm.single_copy_choice != nullptr && SingleCopySize(comm, bytes) &&
                          RingOrSingleCopy(algorithm);
    const auto t0 = measured ? std::chrono::steady_clock::now()  // (a clock read costs ~25 ns)
                             : std::chrono::steady_clock::time_point();
    bool ran_ring = false;  // the single copy fell back to the ring (memory it cannot read)
    Status s;
    switch (algorithm) {
      case Algorithm::kHierarchical:
        s = HierarchicalAllreduce(comm, buf, parts, dtype, sum_op);
        break;
      case Algorithm::kDirect:
        s = DirectAllreduce(comm, in, buf, parts, dtype, sum_op);
        break;
      case Algorithm::kRing:
        s = RingAllreduce(comm, in, buf, parts, dtype, sum_op, factor);
        factor = 1.0;  // applied inside the ring
        break;
      case Algorithm::kSingleCopy:
        s = SingleCopyAllreduce(comm, in, buf, parts, dtype, sum_op, factor, &ran_ring);
        factor = 1.0;  // applied to each piece as it is reduced
        break;
    }
    HVD_RETURN_IF_ERROR(s);
    if (measured) {
      HVD_RETURN_IF_ERROR(comm.single_copy_choice->Done(
          comm, bytes, algorithm == Algorithm::kSingleCopy && !ran_ring,
          std::chrono::steady_clock::now() - t0));
    }
  }
  // One rank reduces nothing: bool still owes its 0/1 results (Scale by 1 normalizes them).
  if (factor != 1.0 || (comm.size() == 1 && dtype == DataType::kBool)) {
    Scale(buf, count, dtype, factor);
  }
  return Status::OK();
}

Status AllreduceExtents(const Comm& comm, const std::vector<Extent>& extents,
                        const std::vector<size_t>& parts, DataType dtype, ReduceOp op,
                        double postscale) {
  HVD_RETURN_IF_ERROR(CheckArguments(comm, parts, dtype, op));
  const size_t count = parts.back();
  if (count == 0) return Status::OK();
  if (extents.empty() || extents[0].begin != 0) {
    return InvalidArgument("allreduce over extents: the first extent must begin at element 0");
  }
  for (size_t k = 0; k < extents.size(); ++k) {
    const size_t end = k + 1 < extents.size() ? extents[k + 1].begin : count;
    if (end < extents[k].begin || end > count) {
      return InvalidArgument("allreduce over extents: extent " + std::to_string(k) +
                             " begins at element " + std::to_string(extents[k].begin) +
                             ", past the next one or the buffer's " + std::to_string(count));
    }
    if (end > extents[k].begin && extents[k].data == nullptr) {
      return InvalidArgument("allreduce over extents: extent " + std::to_string(k) +
                             " holds elements but no memory");
    }
  }
  const size_t bytes = count * DataTypeSize(dtype);
  if (!ExtentsTake(comm, count, dtype)) {
    return FailedPrecondition(std::string("allreduce over extents: ") + std::to_string(bytes) +
                              " bytes take the " + AllreduceAlgorithm(comm, bytes) +
                              " path here (or its direct path), and only rings reduce extents");
  }
  if (comm.gathered != nullptr) {
    return Internal("allreduce over extents: the inputs came with the negotiation");
  }
  // As AllreduceParts: one factor, applied inside the (cross) ring to each piece as it completes.
  const double factor = op == ReduceOp::kAverage ? postscale / comm.size() : postscale;
  const ReduceOp sum_op = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
  if (comm.hierarchy != nullptr) {
    return HierarchicalAllreduce(comm, extents, parts, dtype, sum_op, factor);
  }
  return RingAllreduce(comm, extents, parts, dtype, sum_op, factor);
}

Status Allreduce(const Comm& comm, void* buf, size_t count, DataType dtype, ReduceOp op) {
  if (comm.transport == nullptr) return InvalidArgument("allreduce: no transport");
  return AllreduceParts(comm, buf, AllreduceLayout(comm, count), dtype, op);
}

}  // namespace hvd::runtime::collectives
