// Hierarchical allreduce for jobs on several hosts with L ranks each: reduce within each host
// over shared memory, the ring across hosts, allgather within the host. Chosen automatically when
// a job spans hosts (MakeHierarchy); Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE, with the host's
// reduction scattered so that all L ranks carry cross-host traffic at once.
//
// Vocabulary (H hosts, L ranks per host, this rank's local rank l):
//   local group - the L ranks of this host (Hierarchy::local); cross group - the H ranks with
//                local rank l, one per host (Hierarchy::cross).
//   parts       - the buffer has L*H parts (AllreduceLayout); local segment t is parts
//                t*H .. t*H+H-1, cross part u of it is part t*H+u.
// Large buffers (unless both groups would take the direct path, see Comm::direct_max_bytes):
//   1. ring reduce-scatter over the local group on the L local segments: local rank l ends with
//      segment (l+1) mod L reduced over the host;
//   2. allreduce of that segment over the cross group, its H parts as the parts (direct or ring
//      by the same rule as a flat allreduce);
//   3. ring allgather over the local group.
//   Each rank moves 2(L-1)/L of the buffer over shared memory and 2(H-1)/H of a 1/L share over
//   the network, and the L ranks of a host use the network concurrently.
// Small buffers: two rounds instead of 2(L-1) + 2(H-1) + ...:
//   1. direct allreduce over the local group with the L local segments as parts: every local rank
//      holds the host's sum of the whole buffer;
//   2. direct allreduce over the cross group of the whole buffer, all L*H parts (part t*H+u
//      starts at cross rank u, as step 2 above).
// Both orders are the same: local segment t in ring order from local rank t, then part t*H+u in
// ring order from host u, so results do not depend on the size thresholds.
// Over extents (a buffer in several places: collectives.h) only the large buffers' path runs
// (ExtentsTake says where): its rings take extents, the cross step a slice of them (the direct
// path there through a contiguous copy of at most its size limit).
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/pipeline.h"
#include "collectives/reduce.h"

namespace hvd::runtime::collectives {
namespace {

// Virtual elements [begin, end) of the `total` in `x` as extents of their own from element 0,
// without inputs: the cross ring reduces what the host's reduce-scatter left in the output.
std::vector<Extent> Slice(const std::vector<Extent>& x, size_t total, size_t es, size_t begin,
                          size_t end) {
  std::vector<Extent> out;
  size_t at = 0;
  internal::ForEachFragment(x, total, es, begin, end, [&](char* data, const char*, size_t bytes) {
    out.push_back({at, data, nullptr});
    at += bytes / es;
  });
  return out;
}

// The direct allreduce across hosts of a segment in several extents, or one to scale (the
// extents' version scales here, before the allgather): through a contiguous copy, at most the
// cross group's direct size, reduced in the same order, so the same bits.
Status DirectThroughCopy(const Comm& cross, const std::vector<Extent>& segment,
                         const std::vector<size_t>& parts, DataType dtype, ReduceOp op,
                         double scale) {
  const size_t es = DataTypeSize(dtype), bytes = parts.back() * es;
  thread_local std::vector<char> copy;
  if (copy.size() < bytes) copy.resize(bytes);
  // Calls fn(the extent's bytes, their place in the copy, their size) along the segment.
  auto each = [&](auto&& fn) {
    char* c = copy.data();
    internal::ForEachFragment(segment, parts.back(), es, 0, parts.back(),
                              [&](char* data, const char*, size_t n) {
                                fn(data, c, n);
                                c += n;
                              });
  };
  each([](char* data, char* c, size_t n) { std::memcpy(c, data, n); });
  HVD_RETURN_IF_ERROR(DirectAllreduce(cross, copy.data(), parts, dtype, op));
  if (scale != 1.0) Scale(copy.data(), parts.back(), dtype, scale);
  each([](char* data, char* c, size_t n) { std::memcpy(data, c, n); });
  return Status::OK();
}

// The large buffers' path: the rings within the host, and the cross group's allreduce of this
// rank's segment, each result element multiplied by `scale` there.
Status Rings(const Comm& comm, const std::vector<Extent>& extents, const std::vector<size_t>& off,
             DataType dtype, ReduceOp op, double scale) {
  const Comm local = comm.OverLocal();
  const Comm cross = comm.OverCross();
  const int nl = local.size(), nh = cross.size();
  const size_t es = DataTypeSize(dtype);
  std::vector<size_t> local_off(nl + 1);
  for (int t = 0; t <= nl; ++t) local_off[t] = off[static_cast<size_t>(t) * nh];

  HVD_RETURN_IF_ERROR_CTX(RingReduceScatter(local, extents, local_off, dtype, op),
                          "hierarchical allreduce, within the host");
  // The segment this rank holds reduced over its host, and its H parts relative to its start.
  const int t = (local.rank() + 1) % nl;
  std::vector<size_t> parts(nh + 1);
  for (int u = 0; u <= nh; ++u) parts[u] = off[static_cast<size_t>(t) * nh + u] - local_off[t];
  const std::vector<Extent> segment =
      Slice(extents, off.back(), es, local_off[t], local_off[t + 1]);
  Status s;  // an empty segment (fewer elements than local ranks) has nothing to reduce
  if (!segment.empty()) {
    if (!UseDirect(cross, parts.back() * es)) {
      s = RingAllreduce(cross, segment, parts, dtype, op, scale);
    } else if (segment.size() == 1 && scale == 1.0) {
      s = DirectAllreduce(cross, segment[0].data, parts, dtype, op);
    } else {
      s = DirectThroughCopy(cross, segment, parts, dtype, op, scale);
    }
  }
  HVD_RETURN_IF_ERROR_CTX(s, "hierarchical allreduce, across hosts");
  return RingAllgather(local, extents, local_off, dtype)
      .WithContext("hierarchical allreduce, within the host");
}

Status CheckParts(const Comm& comm, const std::vector<size_t>& off) {
  if (comm.hierarchy == nullptr) return Internal("hierarchical allreduce without a hierarchy");
  const int nl = comm.hierarchy->local->size(), nh = comm.hierarchy->cross->size();
  if (off.size() != static_cast<size_t>(nl * nh) + 1) {
    return Internal("hierarchical allreduce: " + std::to_string(off.size() - 1) + " parts for " +
                    std::to_string(nl) + " local ranks x " + std::to_string(nh) + " hosts");
  }
  return Status::OK();
}

}  // namespace

Status HierarchicalAllreduce(const Comm& comm, void* buf, const std::vector<size_t>& off,
                             DataType dtype, ReduceOp op) {
  HVD_RETURN_IF_ERROR(CheckParts(comm, off));
  const Comm local = comm.OverLocal();
  const Comm cross = comm.OverCross();
  const size_t bytes = off.back() * DataTypeSize(dtype);
  if (UseDirect(local, bytes) && UseDirect(cross, bytes)) {
    const int nl = local.size(), nh = cross.size();
    std::vector<size_t> local_off(nl + 1);
    for (int t = 0; t <= nl; ++t) local_off[t] = off[static_cast<size_t>(t) * nh];
    HVD_RETURN_IF_ERROR_CTX(DirectAllreduce(local, buf, local_off, dtype, op),
                            "hierarchical allreduce, within the host");
    return DirectAllreduce(cross, buf, off, dtype, op)
        .WithContext("hierarchical allreduce, across hosts");
  }
  return Rings(comm, {Extent{0, static_cast<char*>(buf), nullptr}}, off, dtype, op, 1.0);
}

Status HierarchicalAllreduce(const Comm& comm, const std::vector<Extent>& extents,
                             const std::vector<size_t>& off, DataType dtype, ReduceOp op,
                             double scale) {
  HVD_RETURN_IF_ERROR(CheckParts(comm, off));
  if (!ExtentsTake(comm, off.back(), dtype)) {
    return Internal("hierarchical allreduce over extents where its small buffers' path runs");
  }
  return Rings(comm, extents, off, dtype, op, scale);
}

}  // namespace hvd::runtime::collectives
