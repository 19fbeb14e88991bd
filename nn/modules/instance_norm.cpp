// nn::InstanceNorm1d/2d/3d: PyTorch's _InstanceNorm
// (torch/nn/modules/instancenorm.py), forward through minidl::instance_norm
// (ops/instance_norm.h holds the math).
#include "minidl/nn/modules/instance_norm.h"

#include <iostream>

#include "minidl/core/check.h"
#include "minidl/ops/instance_norm.h"

namespace minidl::nn {

Tensor InstanceNormImplBase::forward(const Tensor& input) {
  MINIDL_CHECK(input.defined(), name(), ": the input tensor is undefined");
  const int64_t unbatched = no_batch_dim();
  MINIDL_CHECK(input.dim() == unbatched || input.dim() == unbatched + 1, "expected ", unbatched, "D or ",
               unbatched + 1, "D input (got ", input.dim(), "D input)");
  const auto& o = options;
  const int64_t feature_dim = input.dim() - unbatched;
  if (input.size(feature_dim) != o.num_features()) {
    MINIDL_CHECK(!o.affine(), "expected input's size at dim=", feature_dim, " to match num_features (",
                 o.num_features(), "), but got: ", input.size(feature_dim), ".");
    std::cerr << "UserWarning: input's size at dim=" << feature_dim
              << " does not match num_features. You can silence this warning by not passing in num_features, "
                 "which is not used because affine=False\n";
  }
  const bool use_input_stats = is_training() || !o.track_running_stats();
  if (use_input_stats && running_mean.defined() && !o.momentum() && !warned_momentum_none_) {
    warned_momentum_none_ = true;
    std::cerr << "Warning: " << name()
              << " with momentum=None does not update running_mean/running_var: like PyTorch, instance_norm "
                 "gets momentum 0 (not a cumulative average). Pass a momentum (e.g. 0.1) to track them.\n";
  }
  const Tensor batched = input.dim() == unbatched ? input.unsqueeze(0) : input;
  Tensor y = instance_norm(batched, running_mean, running_var, weight, bias, use_input_stats,
                           o.momentum().value_or(0.0), o.eps());
  return input.dim() == unbatched ? y.squeeze(0) : y;
}

}  // namespace minidl::nn
