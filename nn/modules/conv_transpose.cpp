// nn::ConvTranspose2d / ConvTranspose3d: PyTorch's option checks and init
// (nn/modules/conv.cpp's conv_detail), forward through conv_transpose2d/3d.
#include "minidl/nn/modules/conv_transpose.h"

#include "minidl/core/check.h"
#include "minidl/nn/modules/conv.h"
#include "minidl/ops/conv_transpose.h"

namespace minidl::nn {

namespace {

template <size_t D>
std::vector<int64_t> vec(const std::array<int64_t, D>& a) {
  return {a.begin(), a.end()};
}

// Checks and the weight shape, for both dimensionalities.
template <class O>
Shape checked_weight_shape(const char* name, const O& o, const std::vector<int64_t>& kernel,
                           const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                           const std::vector<int64_t>& dilation) {
  MINIDL_CHECK(o.padding_mode() == "zeros", "Only \"zeros\" padding mode is supported for ", name);
  conv_detail::check_options(name, o.in_channels(), o.out_channels(), o.groups(), kernel, stride, dilation, "",
                             padding, o.padding_mode());
  Shape shape{o.in_channels(), o.out_channels() / o.groups()};
  shape.insert(shape.end(), kernel.begin(), kernel.end());
  return shape;
}

std::string repr(int64_t in, int64_t out, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                 const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                 const std::vector<int64_t>& output_padding, int64_t groups, bool has_bias) {
  using conv_detail::tuple;
  auto all = [](const std::vector<int64_t>& v, int64_t x) {
    return std::all_of(v.begin(), v.end(), [x](int64_t e) { return e == x; });
  };
  std::string s = std::to_string(in) + ", " + std::to_string(out) + ", kernel_size=" + tuple(kernel) +
                  ", stride=" + tuple(stride);
  if (!all(padding, 0)) s += ", padding=" + tuple(padding);
  if (!all(dilation, 1)) s += ", dilation=" + tuple(dilation);
  if (!all(output_padding, 0)) s += ", output_padding=" + tuple(output_padding);
  if (groups != 1) s += ", groups=" + std::to_string(groups);
  if (!has_bias) s += ", bias=False";
  return s;
}

}  // namespace

ConvTranspose2dImpl::ConvTranspose2dImpl(const ConvTranspose2dOptions& options_)
    : Module("ConvTranspose2d"), options(options_) {
  const auto& o = options;
  weight = register_parameter(
      "weight", empty(checked_weight_shape("ConvTranspose2d", o, vec<2>(o.kernel_size()), vec<2>(o.stride()),
                                           vec<2>(o.padding()), vec<2>(o.dilation()))));
  bias = register_parameter("bias", o.bias() ? empty({o.out_channels()}) : Tensor());
  reset_parameters();
}

void ConvTranspose2dImpl::reset_parameters() { conv_detail::reset(weight, bias); }

Tensor ConvTranspose2dImpl::forward(const Tensor& input) {
  const auto& o = options;
  return conv_transpose2d(input, weight, bias,
                          {.stride = o.stride(), .padding = o.padding(), .output_padding = o.output_padding(),
                           .groups = o.groups(), .dilation = o.dilation()});
}

std::string ConvTranspose2dImpl::extra_repr() const {
  const auto& o = options;
  return repr(o.in_channels(), o.out_channels(), vec<2>(o.kernel_size()), vec<2>(o.stride()), vec<2>(o.padding()),
              vec<2>(o.dilation()), vec<2>(o.output_padding()), o.groups(), bias.defined());
}

ConvTranspose3dImpl::ConvTranspose3dImpl(const ConvTranspose3dOptions& options_)
    : Module("ConvTranspose3d"), options(options_) {
  const auto& o = options;
  weight = register_parameter(
      "weight", empty(checked_weight_shape("ConvTranspose3d", o, vec<3>(o.kernel_size()), vec<3>(o.stride()),
                                           vec<3>(o.padding()), vec<3>(o.dilation()))));
  bias = register_parameter("bias", o.bias() ? empty({o.out_channels()}) : Tensor());
  reset_parameters();
}

void ConvTranspose3dImpl::reset_parameters() { conv_detail::reset(weight, bias); }

Tensor ConvTranspose3dImpl::forward(const Tensor& input) {
  const auto& o = options;
  return conv_transpose3d(input, weight, bias,
                          {.stride = o.stride(), .padding = o.padding(), .output_padding = o.output_padding(),
                           .groups = o.groups(), .dilation = o.dilation()});
}

std::string ConvTranspose3dImpl::extra_repr() const {
  const auto& o = options;
  return repr(o.in_channels(), o.out_channels(), vec<3>(o.kernel_size()), vec<3>(o.stride()), vec<3>(o.padding()),
              vec<3>(o.dilation()), vec<3>(o.output_padding()), o.groups(), bias.defined());
}

}  // namespace minidl::nn
