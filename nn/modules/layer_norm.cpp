// nn::LayerNorm: torch/nn/modules/normalization.py's LayerNorm, forward
// through minidl::layer_norm (ops/layer_norm.h holds the math).
#include "minidl/nn/modules/layer_norm.h"

#include "minidl/core/check.h"
#include "minidl/nn/init.h"
#include "minidl/ops/layer_norm.h"

namespace minidl::nn {

LayerNormImpl::LayerNormImpl(const LayerNormOptions& options_) : Module("LayerNorm"), options(options_) {
  const Shape& ns = options.normalized_shape();
  for (int64_t s : ns) MINIDL_CHECK(s >= 0, "LayerNorm: expected non-negative sizes in normalized_shape, got ", shape_str(ns));
  const bool affine = options.elementwise_affine();
  weight = register_parameter("weight", affine ? empty(ns) : Tensor());
  bias = register_parameter("bias", affine && options.bias() ? empty(ns) : Tensor());
  reset_parameters();
}

void LayerNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNormImpl::forward(const Tensor& input) {
  return layer_norm(input, options.normalized_shape(), weight, bias, options.eps());
}

std::string LayerNormImpl::extra_repr() const {
  // Python prints the shape as a tuple: (10,) or (64, 32, 32).
  const Shape& ns = options.normalized_shape();
  std::string shape = "(";
  for (size_t i = 0; i < ns.size(); ++i) shape += (i ? ", " : "") + std::to_string(ns[i]);
  shape += ns.size() == 1 ? ",)" : ")";
  return shape + ", eps=" + repr_float(options.eps()) + ", elementwise_affine=" +
         repr_bool(options.elementwise_affine()) + ", bias=" + repr_bool(bias.defined());
}

}  // namespace minidl::nn
