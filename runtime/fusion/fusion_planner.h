// Tensor fusion: packs the allreduces of one cycle into as few collectives as possible.
//
// Vocabulary:
//   item   - one tensor of one response (a grouped allreduce has several).
//   batch  - items run as one collective. Allreduce items share a batch when they agree on dtype,
//            reduce op and scales and their bytes fit the threshold (HVD_FUSION_THRESHOLD);
//            everything else runs alone. A single item larger than the threshold runs alone,
//            without a copy into the fusion buffer.
// The plan depends only on the response list, so every rank computes the same plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fusion/message.h"

namespace hvd::runtime::fusion {

struct BatchItem {
  size_t response = 0;
  size_t tensor = 0;
};

struct Batch {
  std::vector<BatchItem> items;
  int64_t bytes = 0;
};

// Items of OK responses only (error responses are not executed). Order: the first item of each
// batch follows the response order; compatible later items are pulled forward into it.
std::vector<Batch> PlanBatches(const std::vector<Response>& responses, int64_t threshold_bytes);

}  // namespace hvd::runtime::fusion
