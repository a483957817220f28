// torchvision.models.resnet50()'s 161 parameter tensors (its gradients), computed from the
// architecture (torchvision/models/resnet.py): a 7x7 stem, Bottleneck blocks [3, 4, 6, 3] of
// widths 64..512 with expansion 4 and a projection shortcut in each stage's first block, bias-free
// convolutions, BatchNorm weight and bias, and the 1000-way fc. Registration (forward) order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hvd::bench {

struct ParamShape {
  std::string name;
  std::vector<int64_t> shape;

  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

inline constexpr size_t kResNet50Tensors = 161;
inline constexpr int64_t kResNet50Params = 25557032;

inline std::vector<ParamShape> ResNet50Shapes() {
  std::vector<ParamShape> p;
  auto conv = [&](const std::string& name, int64_t out, int64_t in, int64_t k) {
    p.push_back({name + ".weight", {out, in, k, k}});
  };
  auto bn = [&](const std::string& name, int64_t c) {
    p.push_back({name + ".weight", {c}});
    p.push_back({name + ".bias", {c}});
  };
  conv("conv1", 64, 3, 7);
  bn("bn1", 64);
  const int blocks[4] = {3, 4, 6, 3};
  int64_t in = 64;
  for (int l = 0; l < 4; ++l) {
    const int64_t width = int64_t{64} << l;
    const int64_t out = width * 4;
    for (int b = 0; b < blocks[l]; ++b) {
      const std::string pre = "layer" + std::to_string(l + 1) + "." + std::to_string(b) + ".";
      conv(pre + "conv1", width, in, 1);
      bn(pre + "bn1", width);
      conv(pre + "conv2", width, width, 3);
      bn(pre + "bn2", width);
      conv(pre + "conv3", out, width, 1);
      bn(pre + "bn3", out);
      if (b == 0) {
        conv(pre + "downsample.0", out, in, 1);
        bn(pre + "downsample.1", out);
      }
      in = out;
    }
  }
  p.push_back({"fc.weight", {1000, 2048}});
  p.push_back({"fc.bias", {1000}});
  return p;
}

}  // namespace hvd::bench
