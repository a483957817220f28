// Tensor fusion: packs the allreduces of one cycle into as few collectives as possible.
//
// Vocabulary:
//   item   - one tensor of one response (a grouped allreduce has several).
//   batch  - items run as one collective. Allreduce items share a batch when they agree on dtype,
//            reduce op and scales and their bytes fit the threshold (HVD_FUSION_THRESHOLD);
//            everything else runs alone. A single item larger than the threshold runs alone,
//            without a copy into the fusion buffer.
//   large  - an item above max_tensor_bytes (HVD_FUSION_MAX_TENSOR_BYTES). It is never copied
//            into the fusion buffer: a copy in and a copy out of a tensor of megabytes cost far
//            more than the collective's fixed cost that fusing saves (microseconds on shared
//            memory, tens of them on TCP: docs/performance-fusion.md, "Tensor fusion"). A large host
//            item still joins a batch, `in_place`: where rings take the batch, the executor
//            reduces it where it lies in the same collective as the rest (collectives::Extent),
//            which saves the fixed cost without the copies (one delay per collective across
//            hosts); elsewhere it runs alone after the batch's fused items. A large device item
//            runs alone.
// The plan depends only on the response list, so every rank computes the same plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "negotiation/message.h"

namespace hvd::runtime::fusion {

struct BatchItem {
  size_t response = 0;
  size_t tensor = 0;
  bool in_place = false;  // large: reduced where it lies, never packed (see "large")
};

// The defaults of HVD_FUSION_THRESHOLD and HVD_FUSION_MAX_TENSOR_BYTES (fusion_settings.cc),
// and so of every FusionLimits not read from the environment.
inline constexpr int64_t kDefaultFusionThresholdBytes = int64_t{128} << 20;
inline constexpr int64_t kDefaultFusionMaxTensorBytes = int64_t{64} << 10;

struct FusionLimits {
  // A batch's bytes at most; 0 fuses nothing.
  int64_t threshold_bytes = kDefaultFusionThresholdBytes;
  // Larger tensors are never fused; 0: no such limit.
  int64_t max_tensor_bytes = kDefaultFusionMaxTensorBytes;
};

struct Batch {
  std::vector<BatchItem> items;
  int64_t bytes = 0;
};

// Items of OK responses only (error responses are not executed). Order: the first item of each
// batch follows the response order; compatible later items are pulled forward into it.
std::vector<Batch> PlanBatches(const std::vector<negotiation::Response>& responses,
                               const FusionLimits& limits);
// The same into *batches, whose elements (and their item vectors) are reused: planning runs for
// every operation, and a steady state then allocates nothing.
void PlanBatches(const std::vector<negotiation::Response>& responses, const FusionLimits& limits,
                 std::vector<Batch>* batches);

}  // namespace hvd::runtime::fusion
