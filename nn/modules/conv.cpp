// nn::Conv2d and nn::Conv3d: check the options with PyTorch's messages,
// register weight and bias, PyTorch's default init, forward through
// conv2d / conv3d (padding strings through ops/conv_padding.h, padding modes
// through pad() first, as torch.nn's _conv_forward).
#include "minidl/nn/modules/conv.h"

#include <cmath>

#include "minidl/core/check.h"
#include "minidl/nn/init.h"
#include "minidl/ops/conv2d.h"
#include "minidl/ops/conv3d.h"
#include "minidl/ops/conv_padding.h"
#include "minidl/ops/pad.h"

namespace minidl::nn {

namespace conv_detail {

void check_options(const char* name, int64_t in_channels, int64_t out_channels, int64_t groups,
                   const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                   const std::vector<int64_t>& dilation, const std::string& padding_name,
                   const std::vector<int64_t>& padding, const std::string& padding_mode) {
  MINIDL_CHECK(groups > 0, "groups must be a positive integer");
  MINIDL_CHECK(in_channels >= 0 && out_channels >= 0, name,
               ": expected non-negative in_channels and out_channels, got ", in_channels, " and ", out_channels);
  MINIDL_CHECK(in_channels % groups == 0, "in_channels must be divisible by groups");
  MINIDL_CHECK(out_channels % groups == 0, "out_channels must be divisible by groups");
  for (size_t i = 0; i < kernel.size(); ++i) {
    MINIDL_CHECK(kernel[i] > 0, name, ": kernel_size must be positive, got ", tuple(kernel));
    MINIDL_CHECK(stride[i] > 0, "non-positive stride is not supported");
    MINIDL_CHECK(padding[i] >= 0, "negative padding is not supported");
    MINIDL_CHECK(dilation[i] > 0, "dilation should be greater than zero");
  }
  if (!padding_name.empty()) check_conv_padding_string(padding_name, stride);
  MINIDL_CHECK(padding_mode == "zeros" || padding_mode == "reflect" || padding_mode == "replicate" ||
                   padding_mode == "circular",
               "padding_mode must be one of {'circular', 'reflect', 'zeros', 'replicate'}, but got padding_mode='",
               padding_mode, "'");
}

void reset(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

std::string tuple(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ")";
}

}  // namespace conv_detail

namespace {

template <size_t D>
std::vector<int64_t> vec(const std::array<int64_t, D>& a) {
  return {a.begin(), a.end()};
}

// PyTorch's _reversed_padding_repeated_twice: the F.pad argument that
// padding_mode uses (last dimension first).
std::vector<int64_t> reversed_padding(const std::string& name, const std::vector<int64_t>& padding,
                                      const std::vector<int64_t>& kernel, const std::vector<int64_t>& dilation) {
  if (name == "same") return conv_same_pads(kernel, dilation);
  std::vector<int64_t> pads;
  for (size_t i = padding.size(); i-- > 0;) {
    const int64_t p = name == "valid" ? 0 : padding[i];
    pads.push_back(p);
    pads.push_back(p);
  }
  return pads;
}

// The shared part of the modules' extra_repr (PyTorch's _ConvNd.extra_repr).
std::string repr(int64_t in, int64_t out, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                 const std::string& padding_name, const std::vector<int64_t>& padding,
                 const std::vector<int64_t>& dilation, const std::vector<int64_t>& output_padding, int64_t groups,
                 bool has_bias, const std::string& padding_mode) {
  using conv_detail::tuple;
  auto all = [](const std::vector<int64_t>& v, int64_t x) {
    return std::all_of(v.begin(), v.end(), [x](int64_t e) { return e == x; });
  };
  std::string s = std::to_string(in) + ", " + std::to_string(out) + ", kernel_size=" + tuple(kernel) +
                  ", stride=" + tuple(stride);
  if (!padding_name.empty())
    s += ", padding=" + padding_name;
  else if (!all(padding, 0))
    s += ", padding=" + tuple(padding);
  if (!all(dilation, 1)) s += ", dilation=" + tuple(dilation);
  if (!all(output_padding, 0)) s += ", output_padding=" + tuple(output_padding);
  if (groups != 1) s += ", groups=" + std::to_string(groups);
  if (!has_bias) s += ", bias=False";
  if (padding_mode != "zeros") s += ", padding_mode=" + padding_mode;
  return s;
}

}  // namespace

Conv2dImpl::Conv2dImpl(const Conv2dOptions& options_) : Module("Conv2d"), options(options_) {
  const auto& o = options;
  conv_detail::check_options("Conv2d", o.in_channels(), o.out_channels(), o.groups(), vec<2>(o.kernel_size()),
                             vec<2>(o.stride()), vec<2>(o.dilation()), o.padding().name, vec<2>(o.padding().size),
                             o.padding_mode());
  weight = register_parameter("weight", empty({o.out_channels(), o.in_channels() / o.groups(),
                                               o.kernel_size()[0], o.kernel_size()[1]}));
  bias = register_parameter("bias", o.bias() ? empty({o.out_channels()}) : Tensor());
  reset_parameters();
}

void Conv2dImpl::reset_parameters() { conv_detail::reset(weight, bias); }

Tensor Conv2dImpl::forward(const Tensor& input) {
  const auto& o = options;
  Conv2dParams p{.stride = o.stride(), .padding = o.padding().size, .dilation = o.dilation(), .groups = o.groups()};
  if (o.padding_mode() != "zeros") {
    p.padding = {0, 0};
    return conv2d(pad(input, reversed_padding(o.padding().name, vec<2>(o.padding().size), vec<2>(o.kernel_size()),
                                              vec<2>(o.dilation())),
                      o.padding_mode()),
                  weight, bias, p);
  }
  if (o.padding().is_string())
    return conv2d(input, weight, bias, o.padding().name.c_str(), o.stride(), o.dilation(), o.groups());
  return conv2d(input, weight, bias, p);
}

std::string Conv2dImpl::extra_repr() const {
  const auto& o = options;
  return repr(o.in_channels(), o.out_channels(), vec<2>(o.kernel_size()), vec<2>(o.stride()), o.padding().name,
              vec<2>(o.padding().size), vec<2>(o.dilation()), {0, 0}, o.groups(), bias.defined(), o.padding_mode());
}

Conv3dImpl::Conv3dImpl(const Conv3dOptions& options_) : Module("Conv3d"), options(options_) {
  const auto& o = options;
  conv_detail::check_options("Conv3d", o.in_channels(), o.out_channels(), o.groups(), vec<3>(o.kernel_size()),
                             vec<3>(o.stride()), vec<3>(o.dilation()), o.padding().name, vec<3>(o.padding().size),
                             o.padding_mode());
  weight = register_parameter("weight", empty({o.out_channels(), o.in_channels() / o.groups(), o.kernel_size()[0],
                                               o.kernel_size()[1], o.kernel_size()[2]}));
  bias = register_parameter("bias", o.bias() ? empty({o.out_channels()}) : Tensor());
  reset_parameters();
}

void Conv3dImpl::reset_parameters() { conv_detail::reset(weight, bias); }

Tensor Conv3dImpl::forward(const Tensor& input) {
  const auto& o = options;
  Conv3dParams p{.stride = o.stride(), .padding = o.padding().size, .dilation = o.dilation(), .groups = o.groups()};
  if (o.padding_mode() != "zeros") {
    p.padding = {0, 0, 0};
    return conv3d(pad(input, reversed_padding(o.padding().name, vec<3>(o.padding().size), vec<3>(o.kernel_size()),
                                              vec<3>(o.dilation())),
                      o.padding_mode()),
                  weight, bias, p);
  }
  if (o.padding().is_string())
    return conv3d(input, weight, bias, o.padding().name.c_str(), o.stride(), o.dilation(), o.groups());
  return conv3d(input, weight, bias, p);
}

std::string Conv3dImpl::extra_repr() const {
  const auto& o = options;
  return repr(o.in_channels(), o.out_channels(), vec<3>(o.kernel_size()), vec<3>(o.stride()), o.padding().name,
              vec<3>(o.padding().size), vec<3>(o.dilation()), {0, 0, 0}, o.groups(), bias.defined(),
              o.padding_mode());
}

}  // namespace minidl::nn
