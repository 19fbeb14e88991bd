// LayerNorm, as torch.nn.LayerNorm(normalized_shape, eps=1e-5,
// elementwise_affine=True, bias=True): statistics over the trailing
// normalized_shape dims, the same in train and eval; weight (ones) and bias
// (zeros) of shape normalized_shape when elementwise_affine (bias=False keeps
// the weight only).
//
//   auto ln = nn::LayerNorm(Shape{64, 32, 32});
//   auto ln2 = nn::LayerNorm(nn::LayerNormOptions({10}).eps(1e-6).bias(false));
#pragma once

#include <string>

#include "minidl/nn/module.h"

namespace minidl::nn {

struct LayerNormOptions {
  LayerNormOptions(Shape normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}  // NOLINT
  MINIDL_ARG(Shape, normalized_shape);
  MINIDL_ARG(double, eps) = 1e-5;
  MINIDL_ARG(bool, elementwise_affine) = true;
  MINIDL_ARG(bool, bias) = true;
};

class LayerNormImpl : public Module {
 public:
  explicit LayerNormImpl(const LayerNormOptions& options);
  LayerNormImpl(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true)
      : LayerNormImpl(LayerNormOptions(std::move(normalized_shape)).eps(eps).elementwise_affine(elementwise_affine).bias(bias)) {}

  void reset_parameters();  // weight = 1, bias = 0
  Tensor forward(const Tensor& input) override;
  // "(64, 32, 32), eps=1e-05, elementwise_affine=True, bias=True"
  std::string extra_repr() const override;

  LayerNormOptions options;
  Tensor weight, bias;
};
MINIDL_MODULE(LayerNorm);

}  // namespace minidl::nn
