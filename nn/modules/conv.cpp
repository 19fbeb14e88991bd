// nn::Conv2d: checks the options with PyTorch's messages, registers weight
// and bias, PyTorch's default init, forward through minidl::conv2d.
#include "minidl/nn/modules/conv.h"

#include <cmath>

#include "minidl/core/check.h"
#include "minidl/nn/init.h"
#include "minidl/ops/conv2d.h"

namespace minidl::nn {

Conv2dImpl::Conv2dImpl(const Conv2dOptions& options_) : Module("Conv2d"), options(options_) {
  const auto& o = options;
  MINIDL_CHECK(o.groups() > 0, "groups must be a positive integer");
  MINIDL_CHECK(o.in_channels() >= 0 && o.out_channels() >= 0,
               "Conv2d: expected non-negative in_channels and out_channels, got ", o.in_channels(),
               " and ", o.out_channels());
  MINIDL_CHECK(o.in_channels() % o.groups() == 0, "in_channels must be divisible by groups");
  MINIDL_CHECK(o.out_channels() % o.groups() == 0, "out_channels must be divisible by groups");
  for (int i = 0; i < 2; ++i) {
    MINIDL_CHECK(o.kernel_size()[i] > 0, "Conv2d: kernel_size must be positive, got ", o.kernel_size().pair_str());
    MINIDL_CHECK(o.stride()[i] > 0, "non-positive stride is not supported");
    MINIDL_CHECK(o.padding()[i] >= 0, "negative padding is not supported");
    MINIDL_CHECK(o.dilation()[i] > 0, "dilation should be greater than zero");
  }
  weight = register_parameter("weight", empty({o.out_channels(), o.in_channels() / o.groups(),
                                               o.kernel_size()[0], o.kernel_size()[1]}));
  bias = register_parameter("bias", o.bias() ? empty({o.out_channels()}) : Tensor());
  reset_parameters();
}

void Conv2dImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2dImpl::forward(const Tensor& input) {
  Conv2dParams p;
  p.stride = options.stride();
  p.padding = options.padding();
  p.dilation = options.dilation();
  p.groups = options.groups();
  return conv2d(input, weight, bias, p);
}

std::string Conv2dImpl::extra_repr() const {
  const auto& o = options;
  std::string s = std::to_string(o.in_channels()) + ", " + std::to_string(o.out_channels()) +
                  ", kernel_size=" + o.kernel_size().pair_str() + ", stride=" + o.stride().pair_str();
  if (o.padding() != Int2(0)) s += ", padding=" + o.padding().pair_str();
  if (o.dilation() != Int2(1)) s += ", dilation=" + o.dilation().pair_str();
  if (o.groups() != 1) s += ", groups=" + std::to_string(o.groups());
  if (!bias.defined()) s += ", bias=False";
  return s;
}

}  // namespace minidl::nn
