// SmallNet: a plain (no residual) 4-conv net for CIFAR-10 / Fashion-MNIST,
// defined exactly as:
//   conv 3x3 (in -> 64, no bias) -> norm -> ReLU
//   3 blocks: conv 3x3 (no bias) -> max-pool 2 -> norm -> ReLU, widths 128, 256, 512
//   global max-pool -> linear 512 -> num_classes
// 1,557,066 parameters for CIFAR-10 with BatchNorm (1,555,914 with 1 input
// channel). ModelOptions::width scales the widths (0.5: 32-64-128-256).
// 28x28 inputs work too (28 -> 14 -> 7 -> 3 before the global pool).
// Names: "conv1"/"bn1" (stem), "conv2"/"bn2" .. "conv4"/"bn4" (blocks), "fc";
// each norm is an nn::AnyModule made by models::make_norm, so BN -> GN
// conversion can swap it. Layers keep PyTorch's default init.
#pragma once

#include <array>

#include "minidl/models/model_options.h"
#include "minidl/nn/module.h"
#include "minidl/nn/modules/conv.h"
#include "minidl/nn/modules/linear.h"

namespace minidl::models {

class SmallNetImpl : public nn::Module {
 public:
  explicit SmallNetImpl(const ModelOptions& options = {});
  Tensor forward(const Tensor& input) override;

  std::array<nn::Conv2d, 4> convs{nullptr, nullptr, nullptr, nullptr};  // "conv1".."conv4"
  std::array<nn::AnyModule, 4> norms;                                   // "bn1".."bn4"
  nn::Linear fc{nullptr};
};
MINIDL_MODULE(SmallNet);

}  // namespace minidl::models
