// GroupNorm, as torch.nn.GroupNorm(num_groups, num_channels, eps=1e-5,
// affine=True, *, bias=True): statistics per (sample, group of channels), the
// same in train and eval; per-channel weight (ones) and bias (zeros) when
// affine, the bias only with bias=true (affine=false: neither).
// num_channels must be divisible by num_groups (checked at construction).
//
//   auto gn = nn::GroupNorm(32, 64);
#pragma once

#include <cstdint>
#include <string>

#include "minidl/nn/module.h"

namespace minidl::nn {

struct GroupNormOptions {
  GroupNormOptions(int64_t num_groups, int64_t num_channels) : num_groups_(num_groups), num_channels_(num_channels) {}
  MINIDL_ARG(int64_t, num_groups);
  MINIDL_ARG(int64_t, num_channels);
  MINIDL_ARG(double, eps) = 1e-5;
  MINIDL_ARG(bool, affine) = true;
  MINIDL_ARG(bool, bias) = true;  // ignored without affine, as PyTorch
};

class GroupNormImpl : public Module {
 public:
  explicit GroupNormImpl(const GroupNormOptions& options);
  GroupNormImpl(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true)
      : GroupNormImpl(GroupNormOptions(num_groups, num_channels).eps(eps).affine(affine)) {}

  void reset_parameters();  // weight = 1, bias = 0
  Tensor forward(const Tensor& input) override;
  // "32, 64, eps=1e-05, affine=True, bias=True" (bias= says whether there is one)
  std::string extra_repr() const override;

  GroupNormOptions options;
  Tensor weight, bias;
};
MINIDL_MODULE(GroupNorm);

}  // namespace minidl::nn
