#include "fusion/fusion_planner.h"

namespace hvd::runtime::fusion {
namespace {

using negotiation::OpType;
using negotiation::Response;
using negotiation::TensorSpec;

bool Fusable(const Response& a, const Response& b) {
  // One batch divides by one count of contributors.
  // Adasum combines each tensor on its own (per-layer dot products): never fused.
  // Device and host tensors never share a fusion buffer.
  return a.type == OpType::kAllreduce && b.type == OpType::kAllreduce && a.gpu == b.gpu &&
         a.reduce_op == b.reduce_op && a.reduce_op != ReduceOp::kAdasum &&
         a.prescale == b.prescale && a.postscale == b.postscale && a.contributors == b.contributors;
}

int64_t Bytes(const TensorSpec& t) {
  return t.num_elements() * static_cast<int64_t>(DataTypeSize(t.dtype));
}

}  // namespace

std::vector<Batch> PlanBatches(const std::vector<negotiation::Response>& responses,
                               const FusionLimits& limits) {
  std::vector<Batch> batches;
  PlanBatches(responses, limits, &batches);
  return batches;
}

void PlanBatches(const std::vector<negotiation::Response>& responses, const FusionLimits& limits,
                 std::vector<Batch>* batches) {
  const int64_t threshold = limits.threshold_bytes;
  auto large = [&](int64_t bytes) {
    return limits.max_tensor_bytes > 0 && bytes > limits.max_tensor_bytes;
  };
  // One response of at most one tensor (a synchronous operation's cycle: the common case) is one
  // batch of one item, planned here without the general loop's scratch (thread-local lookups,
  // the taken bits): a few hundred instructions of a ~6,500-instruction operation.
  if (responses.size() == 1 && responses[0].tensors.size() <= 1) {
    const Response& r = responses[0];
    if (!r.ok()) {
      batches->clear();
      return;
    }
    batches->resize(1);
    Batch& b = (*batches)[0];
    b.items.assign(1, BatchItem{0, 0});
    b.bytes = 0;
    if (r.type == OpType::kAllreduce && !r.tensors.empty()) {
      b.bytes = Bytes(r.tensors[0]);
      b.items[0].in_place = large(b.bytes) && !r.gpu;
    }
    return;
  }
  // Per thread between calls: planning runs for every operation, and these are its scratch.
  thread_local std::vector<BatchItem> items;
  thread_local std::vector<bool> taken;
  items.clear();
  for (size_t r = 0; r < responses.size(); ++r) {
    if (!responses[r].ok()) continue;
    if (responses[r].tensors.empty()) {
      items.push_back({r, 0});  // barrier, join: one item with no tensor
      continue;
    }
    for (size_t t = 0; t < responses[r].tensors.size(); ++t) items.push_back({r, t});
  }

  size_t n = 0;  // batches planned
  taken.assign(items.size(), false);
  for (size_t i = 0; i < items.size(); ++i) {
    if (taken[i]) continue;
    taken[i] = true;
    const Response& head = responses[items[i].response];
    if (n == batches->size()) batches->emplace_back();
    Batch& b = (*batches)[n++];
    b.items.clear();
    b.bytes = 0;
    b.items.push_back(items[i]);
    // Non-allreduce responses keep all their tensors together, one collective each.
    if (head.type != OpType::kAllreduce) continue;
    const TensorSpec& spec = head.tensors[items[i].tensor];
    b.bytes = Bytes(spec);
    if (large(b.bytes)) {
      if (head.gpu) continue;
      b.items[0].in_place = true;
    }
    for (size_t j = i + 1; j < items.size() && b.bytes < threshold; ++j) {
      if (taken[j]) continue;
      const Response& other = responses[items[j].response];
      if (!Fusable(head, other)) continue;
      const TensorSpec& s = other.tensors[items[j].tensor];
      const bool in_place = large(Bytes(s));
      if (s.dtype != spec.dtype || (in_place && head.gpu) || b.bytes + Bytes(s) > threshold) {
        continue;
      }
      taken[j] = true;
      b.bytes += Bytes(s);
      b.items.push_back({items[j].response, items[j].tensor, in_place});
    }
  }
  batches->resize(n);
}

}  // namespace hvd::runtime::fusion
