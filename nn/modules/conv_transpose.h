// ConvTranspose2d and ConvTranspose3d, as torch.nn's (zero padding only, as PyTorch).
#pragma once

#include <cstdint>
#include <string>

#include "minidl/nn/module.h"

namespace minidl::nn {

// ConvTranspose2dOptions(64, 32, 2).stride(2): sizes take an int or a pair.
struct ConvTranspose2dOptions {
  ConvTranspose2dOptions(int64_t in_channels, int64_t out_channels, Int2 kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  MINIDL_ARG(int64_t, in_channels);
  MINIDL_ARG(int64_t, out_channels);
  MINIDL_ARG(Int2, kernel_size);
  MINIDL_ARG(Int2, stride) = 1;
  MINIDL_ARG(Int2, padding) = 0;
  MINIDL_ARG(Int2, output_padding) = 0;
  MINIDL_ARG(int64_t, groups) = 1;
  MINIDL_ARG(bool, bias) = true;
  MINIDL_ARG(Int2, dilation) = 1;
  MINIDL_ARG(std::string, padding_mode) = "zeros";  // the only one PyTorch supports here
};

// ConvTranspose3dOptions(64, 32, 2).stride(2): sizes take an int or a triple.
struct ConvTranspose3dOptions {
  ConvTranspose3dOptions(int64_t in_channels, int64_t out_channels, Int3 kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  MINIDL_ARG(int64_t, in_channels);
  MINIDL_ARG(int64_t, out_channels);
  MINIDL_ARG(Int3, kernel_size);
  MINIDL_ARG(Int3, stride) = 1;
  MINIDL_ARG(Int3, padding) = 0;
  MINIDL_ARG(Int3, output_padding) = 0;
  MINIDL_ARG(int64_t, groups) = 1;
  MINIDL_ARG(bool, bias) = true;
  MINIDL_ARG(Int3, dilation) = 1;
  MINIDL_ARG(std::string, padding_mode) = "zeros";
};

// weight: (in_channels, out_channels / groups, kH, kW), bias: (out_channels)
// or undefined. Init as PyTorch: kaiming_uniform_(a=sqrt(5)) on weight (fan_in
// from weight's dimension 1, i.e. out_channels / groups * kH * kW), bias ~
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
class ConvTranspose2dImpl : public Module {
 public:
  explicit ConvTranspose2dImpl(const ConvTranspose2dOptions& options);
  ConvTranspose2dImpl(int64_t in_channels, int64_t out_channels, Int2 kernel_size)
      : ConvTranspose2dImpl(ConvTranspose2dOptions(in_channels, out_channels, kernel_size)) {}

  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  // "64, 32, kernel_size=(2, 2), stride=(2, 2)"
  std::string extra_repr() const override;

  ConvTranspose2dOptions options;
  Tensor weight;
  Tensor bias;
};
MINIDL_MODULE(ConvTranspose2d);

// As ConvTranspose2d, one dimension more: weight (in_channels, out_channels / groups, kD, kH, kW).
class ConvTranspose3dImpl : public Module {
 public:
  explicit ConvTranspose3dImpl(const ConvTranspose3dOptions& options);
  ConvTranspose3dImpl(int64_t in_channels, int64_t out_channels, Int3 kernel_size)
      : ConvTranspose3dImpl(ConvTranspose3dOptions(in_channels, out_channels, kernel_size)) {}

  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  ConvTranspose3dOptions options;
  Tensor weight;
  Tensor bias;
};
MINIDL_MODULE(ConvTranspose3d);

}  // namespace minidl::nn
