// MLP: Linear -> ReLU -> ... -> Linear, on inputs flattened from dim 1
// (images (N, C, H, W) become (N, C*H*W)).
//   models::MLP mlp(3 * 32 * 32, {512, 256}, 10);   // 1,707,274 parameters
// Names as nn.Sequential: "layers.0" (first Linear), "layers.1" (ReLU), "layers.2", ...
#pragma once

#include <cstdint>
#include <vector>

#include "minidl/nn/module.h"
#include "minidl/nn/modules/container.h"

namespace minidl::models {

class MLPImpl : public nn::Module {
 public:
  // hidden_sizes may be empty (a linear classifier).
  MLPImpl(int64_t in_features, const std::vector<int64_t>& hidden_sizes, int64_t num_classes);
  Tensor forward(const Tensor& input) override;

  int64_t in_features;
  nn::Sequential layers{nullptr};
};
MINIDL_MODULE(MLP);

}  // namespace minidl::models
