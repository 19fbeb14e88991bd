// Pooling layers: thin modules over ops/pooling.h; the ops check the input.
#include "minidl/nn/modules/pooling.h"

#include "minidl/core/check.h"
#include "minidl/ops/pooling.h"

namespace minidl::nn {

namespace {
void check_pool_sizes(const char* layer, const Int2& kernel, const std::optional<Int2>& stride,
                      const Int2& padding) {
  for (int i = 0; i < 2; ++i) {
    MINIDL_CHECK(kernel[i] > 0, layer, ": kernel_size must be greater than zero, but got ",
                 kernel.pair_str());
    MINIDL_CHECK(!stride || (*stride)[i] > 0, layer, ": stride must be greater than zero, but got ",
                 stride->pair_str());
    MINIDL_CHECK(padding[i] >= 0 && padding[i] <= kernel[i] / 2, layer,
                 ": pad should be at most half of effective kernel size, but got pad=", padding.pair_str(),
                 " and kernel_size=", kernel.pair_str());
  }
}
}  // namespace

MaxPool2dImpl::MaxPool2dImpl(const MaxPool2dOptions& options_) : Module("MaxPool2d"), options(options_) {
  check_pool_sizes("MaxPool2d", options.kernel_size(), options.stride(), options.padding());
}

Tensor MaxPool2dImpl::forward(const Tensor& input) {
  return max_pool2d(input, options.kernel_size(), options.stride().value_or(options.kernel_size()),
                    options.padding());
}

std::string MaxPool2dImpl::extra_repr() const {
  return "kernel_size=" + options.kernel_size().str() +
         ", stride=" + options.stride().value_or(options.kernel_size()).str() +
         ", padding=" + options.padding().str() + ", dilation=1, ceil_mode=False";
}

AvgPool2dImpl::AvgPool2dImpl(const AvgPool2dOptions& options_) : Module("AvgPool2d"), options(options_) {
  check_pool_sizes("AvgPool2d", options.kernel_size(), options.stride(), options.padding());
}

Tensor AvgPool2dImpl::forward(const Tensor& input) {
  return avg_pool2d(input, options.kernel_size(), options.stride().value_or(options.kernel_size()),
                    options.padding(), options.count_include_pad());
}

std::string AvgPool2dImpl::extra_repr() const {
  return "kernel_size=" + options.kernel_size().str() +
         ", stride=" + options.stride().value_or(options.kernel_size()).str() +
         ", padding=" + options.padding().str();
}

AdaptiveAvgPool2dImpl::AdaptiveAvgPool2dImpl(const AdaptiveAvgPool2dOptions& options_)
    : Module("AdaptiveAvgPool2d"), options(options_) {
  for (int i = 0; i < 2; ++i)
    MINIDL_CHECK(options.output_size()[i] >= 0, "AdaptiveAvgPool2d: output_size must be non-negative, got ",
                 options.output_size().pair_str());
}

Tensor AdaptiveAvgPool2dImpl::forward(const Tensor& input) {
  return adaptive_avg_pool2d(input, options.output_size());
}

std::string AdaptiveAvgPool2dImpl::extra_repr() const { return "output_size=" + options.output_size().str(); }

}  // namespace minidl::nn
