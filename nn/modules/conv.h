// Conv2d and Conv3d, as torch.nn.Conv2d / Conv3d: padding as sizes or
// "same" / "valid", and padding_mode zeros, reflect, replicate or circular.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "minidl/nn/module.h"

namespace minidl::nn {

// A conv's padding: sizes (an int or one per dimension) or PyTorch's strings
// "same" (output size = input size, stride 1) and "valid" (no padding).
template <class IntN>
struct ConvPadding {
  IntN size = IntN(0);
  std::string name;  // "same" or "valid"; empty when given as sizes

  ConvPadding(int64_t all) : size(all) {}  // NOLINT: implicit, .padding(1)
  ConvPadding(IntN sizes) : size(sizes) {}  // NOLINT
  template <class... Rest>
  ConvPadding(int64_t a, int64_t b, Rest... rest) : size(a, b, static_cast<int64_t>(rest)...) {}  // NOLINT: {1, 0}
  template <size_t N>
  ConvPadding(const char (&s)[N]) : name(s) {}    // NOLINT: .padding("same") (an array, so 0 stays a size)
  ConvPadding(const std::string& s) : name(s) {}  // NOLINT
  bool is_string() const { return !name.empty(); }
  int64_t operator[](size_t i) const { return size[i]; }
};

// Sizes take an int or a pair: Conv2dOptions(3, 64, 3).stride(2).padding({1, 0}).
struct Conv2dOptions {
  Conv2dOptions(int64_t in_channels, int64_t out_channels, Int2 kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  MINIDL_ARG(int64_t, in_channels);
  MINIDL_ARG(int64_t, out_channels);
  MINIDL_ARG(Int2, kernel_size);
  MINIDL_ARG(Int2, stride) = 1;
  MINIDL_ARG(ConvPadding<Int2>, padding) = 0;
  MINIDL_ARG(Int2, dilation) = 1;
  MINIDL_ARG(int64_t, groups) = 1;
  MINIDL_ARG(bool, bias) = true;
  MINIDL_ARG(std::string, padding_mode) = "zeros";  // "zeros", "reflect", "replicate" or "circular"
};

// Sizes take an int or a triple: Conv3dOptions(1, 32, 3).padding(1).
struct Conv3dOptions {
  Conv3dOptions(int64_t in_channels, int64_t out_channels, Int3 kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  MINIDL_ARG(int64_t, in_channels);
  MINIDL_ARG(int64_t, out_channels);
  MINIDL_ARG(Int3, kernel_size);
  MINIDL_ARG(Int3, stride) = 1;
  MINIDL_ARG(ConvPadding<Int3>, padding) = 0;
  MINIDL_ARG(Int3, dilation) = 1;
  MINIDL_ARG(int64_t, groups) = 1;
  MINIDL_ARG(bool, bias) = true;
  MINIDL_ARG(std::string, padding_mode) = "zeros";
};

// weight: (out_channels, in_channels / groups, kH, kW), bias: (out_channels)
// or undefined. Init as PyTorch: weight ~ kaiming_uniform_(a=sqrt(5)), bias ~
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in_channels / groups * kH * kW.
// A padding_mode other than "zeros" pads the input with pad() first and
// convolves without padding, as PyTorch does.
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

// As Conv2d, one dimension more: weight (out_channels, in_channels / groups, kD, kH, kW).
class Conv3dImpl : public Module {
 public:
  explicit Conv3dImpl(const Conv3dOptions& options);
  Conv3dImpl(int64_t in_channels, int64_t out_channels, Int3 kernel_size)
      : Conv3dImpl(Conv3dOptions(in_channels, out_channels, kernel_size)) {}

  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  Conv3dOptions options;
  Tensor weight;
  Tensor bias;
};
MINIDL_MODULE(Conv3d);

// ---- shared by the conv modules (nn/modules/conv*.cpp) ----
namespace conv_detail {
// PyTorch's checks of a conv module's options (messages included).
void check_options(const char* name, int64_t in_channels, int64_t out_channels, int64_t groups,
                   const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                   const std::vector<int64_t>& dilation, const std::string& padding_name,
                   const std::vector<int64_t>& padding, const std::string& padding_mode);
// kaiming_uniform_(a=sqrt(5)) on weight, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) on bias.
void reset(Tensor& weight, Tensor& bias);
// "(3, 3)" / "(3, 3, 3)"
std::string tuple(const std::vector<int64_t>& v);
}  // namespace conv_detail

}  // namespace minidl::nn
