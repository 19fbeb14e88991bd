// nn::GroupNorm: torch/nn/modules/normalization.py's GroupNorm, forward
// through minidl::group_norm (ops/group_norm.h holds the math).
#include "minidl/nn/modules/group_norm.h"

#include "minidl/core/check.h"
#include "minidl/nn/init.h"
#include "minidl/ops/group_norm.h"

namespace minidl::nn {

GroupNormImpl::GroupNormImpl(const GroupNormOptions& options_) : Module("GroupNorm"), options(options_) {
  const auto& o = options;
  MINIDL_CHECK(o.num_groups() > 0, "GroupNorm: expected a positive num_groups, got ", o.num_groups());
  MINIDL_CHECK(o.num_channels() >= 0, "GroupNorm: expected a non-negative num_channels, got ", o.num_channels());
  MINIDL_CHECK(o.num_channels() % o.num_groups() == 0, "num_channels (", o.num_channels(),
               ") must be divisible by num_groups (", o.num_groups(), ")");
  weight = register_parameter("weight", o.affine() ? empty({o.num_channels()}) : Tensor());
  bias = register_parameter("bias", o.affine() && o.bias() ? empty({o.num_channels()}) : Tensor());
  reset_parameters();
}

void GroupNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor GroupNormImpl::forward(const Tensor& input) {
  return group_norm(input, options.num_groups(), weight, bias, options.eps());
}

std::string GroupNormImpl::extra_repr() const {
  const auto& o = options;
  return std::to_string(o.num_groups()) + ", " + std::to_string(o.num_channels()) + ", eps=" + repr_float(o.eps()) +
         ", affine=" + repr_bool(o.affine()) + ", bias=" + repr_bool(bias.defined());
}

}  // namespace minidl::nn
