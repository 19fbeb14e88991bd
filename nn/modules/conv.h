// Conv2d, as torch.nn.Conv2d (zero padding; NCHW or unbatched CHW input).
#pragma once

#include <cstdint>
#include <string>

#include "minidl/nn/module.h"

namespace minidl::nn {

// Sizes take an int or a pair: Conv2dOptions(3, 64, 3).stride(2).padding({1, 0}).
struct Conv2dOptions {
  Conv2dOptions(int64_t in_channels, int64_t out_channels, Int2 kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  MINIDL_ARG(int64_t, in_channels);
  MINIDL_ARG(int64_t, out_channels);
  MINIDL_ARG(Int2, kernel_size);
  MINIDL_ARG(Int2, stride) = 1;
  MINIDL_ARG(Int2, padding) = 0;
  MINIDL_ARG(Int2, dilation) = 1;
  MINIDL_ARG(int64_t, groups) = 1;
  MINIDL_ARG(bool, bias) = true;
};

// weight: (out_channels, in_channels / groups, kH, kW), bias: (out_channels)
// or undefined. Init as PyTorch: weight ~ kaiming_uniform_(a=sqrt(5)), bias ~
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in_channels / groups * kH * kW.
class Conv2dImpl : public Module {
 public:
  explicit Conv2dImpl(const Conv2dOptions& options);
  Conv2dImpl(int64_t in_channels, int64_t out_channels, Int2 kernel_size)
      : Conv2dImpl(Conv2dOptions(in_channels, out_channels, kernel_size)) {}

  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  // "3, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False"
  std::string extra_repr() const override;

  Conv2dOptions options;
  Tensor weight;
  Tensor bias;
};
MINIDL_MODULE(Conv2d);

}  // namespace minidl::nn
