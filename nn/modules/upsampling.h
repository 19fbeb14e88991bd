// Upsample, as torch.nn.Upsample: interpolate (ops/interpolate.h) with fixed
// options. PyTorch's defaults: mode "nearest", align_corners unset.
//
//   nn::Upsample(nn::UpsampleOptions().scale_factor({2}).mode("trilinear"))
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "minidl/nn/module.h"

namespace minidl::nn {

struct UpsampleOptions {
  // Exactly one of them: one value per spatial dim, or one for all (PyTorch's int / float).
  MINIDL_ARG(std::vector<int64_t>, size);
  MINIDL_ARG(std::vector<double>, scale_factor);
  MINIDL_ARG(std::string, mode) = "nearest";  // nearest | nearest-exact | linear | bilinear | trilinear
  MINIDL_ARG(std::optional<bool>, align_corners);
  MINIDL_ARG(std::optional<bool>, recompute_scale_factor);
};

class UpsampleImpl : public Module {
 public:
  explicit UpsampleImpl(const UpsampleOptions& options = {});
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;  // "scale_factor=2.0, mode='nearest'"
  UpsampleOptions options;
};
MINIDL_MODULE(Upsample);

}  // namespace minidl::nn
