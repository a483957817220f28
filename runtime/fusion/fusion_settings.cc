#include "fusion/fusion_settings.h"

#include "base/settings.h"

namespace hvd::runtime::fusion {
namespace {

constexpr int64_t kMaxBytes = int64_t{1} << 40;

const base::Setting<int64_t> kFusionThreshold("HVD_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD",
                                              kDefaultFusionThresholdBytes,
                                              "fusion buffer bytes; 0 disables tensor fusion",
                                              {0, kMaxBytes}, base::kSameOnEveryRank);
const base::Setting<int64_t> kFusionMaxTensor(
    "HVD_FUSION_MAX_TENSOR_BYTES", nullptr, kDefaultFusionMaxTensorBytes,
    "larger tensors are reduced where they lie, not copied into the fusion buffer (in one "
    "allreduce with the fused ones where rings run it, else alone); 0: no limit",
    {0, kMaxBytes, "0 means no limit; give a value in that range, or unset it for the default"},
    base::kSameOnEveryRank);

}  // namespace

Status ReadFusionLimits(FusionLimits* out) {
  HVD_RETURN_IF_ERROR(kFusionThreshold.Get(&out->threshold_bytes));
  return kFusionMaxTensor.Get(&out->max_tensor_bytes);
}

}  // namespace hvd::runtime::fusion
