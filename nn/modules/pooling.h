// 2-D pooling layers, as torch.nn: MaxPool2d, AvgPool2d, AdaptiveAvgPool2d
// (forward through ops/pooling.h). dilation and ceil_mode are not supported.
#pragma once

#include <optional>
#include <string>

#include "minidl/nn/module.h"

namespace minidl::nn {

struct MaxPool2dOptions {
  MaxPool2dOptions(Int2 kernel_size) : kernel_size_(kernel_size) {}  // NOLINT: MaxPool2d(2)
  MINIDL_ARG(Int2, kernel_size);
  MINIDL_ARG(std::optional<Int2>, stride);  // PyTorch's None: the kernel size
  MINIDL_ARG(Int2, padding) = 0;
};

class MaxPool2dImpl : public Module {
 public:
  explicit MaxPool2dImpl(const MaxPool2dOptions& options);
  explicit MaxPool2dImpl(Int2 kernel_size) : MaxPool2dImpl(MaxPool2dOptions(kernel_size)) {}
  Tensor forward(const Tensor& input) override;
  // "kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False"
  std::string extra_repr() const override;
  MaxPool2dOptions options;
};
MINIDL_MODULE(MaxPool2d);

struct AvgPool2dOptions {
  AvgPool2dOptions(Int2 kernel_size) : kernel_size_(kernel_size) {}  // NOLINT: AvgPool2d(2)
  MINIDL_ARG(Int2, kernel_size);
  MINIDL_ARG(std::optional<Int2>, stride);  // PyTorch's None: the kernel size
  MINIDL_ARG(Int2, padding) = 0;
  MINIDL_ARG(bool, count_include_pad) = true;
};

class AvgPool2dImpl : public Module {
 public:
  explicit AvgPool2dImpl(const AvgPool2dOptions& options);
  explicit AvgPool2dImpl(Int2 kernel_size) : AvgPool2dImpl(AvgPool2dOptions(kernel_size)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;  // "kernel_size=2, stride=2, padding=0"
  AvgPool2dOptions options;
};
MINIDL_MODULE(AvgPool2d);

struct AdaptiveAvgPool2dOptions {
  AdaptiveAvgPool2dOptions(Int2 output_size) : output_size_(output_size) {}  // NOLINT
  MINIDL_ARG(Int2, output_size);
};

class AdaptiveAvgPool2dImpl : public Module {
 public:
  explicit AdaptiveAvgPool2dImpl(const AdaptiveAvgPool2dOptions& options);
  explicit AdaptiveAvgPool2dImpl(Int2 output_size) : AdaptiveAvgPool2dImpl(AdaptiveAvgPool2dOptions(output_size)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;  // "output_size=(1, 1)"
  AdaptiveAvgPool2dOptions options;
};
MINIDL_MODULE(AdaptiveAvgPool2d);

}  // namespace minidl::nn
