// padding="same" / "valid" for conv2d and conv3d (see ops/conv_padding.h).
#include "minidl/ops/conv_padding.h"

#include "minidl/core/check.h"
#include "minidl/ops/conv2d.h"
#include "minidl/ops/conv3d.h"
#include "minidl/ops/pad.h"

namespace minidl {

std::vector<int64_t> conv_same_pads(const std::vector<int64_t>& kernel, const std::vector<int64_t>& dilation) {
  std::vector<int64_t> pads;
  for (size_t i = kernel.size(); i-- > 0;) {
    const int64_t total = dilation[i] * (kernel[i] - 1);
    pads.push_back(total / 2);
    pads.push_back(total - total / 2);
  }
  return pads;
}

void check_conv_padding_string(const std::string& padding, const std::vector<int64_t>& stride) {
  MINIDL_CHECK(padding == "same" || padding == "valid", "Invalid padding string '", padding,
               "', should be one of {'valid', 'same'}");
  if (padding == "same")
    for (int64_t s : stride) MINIDL_CHECK(s == 1, "padding='same' is not supported for strided convolutions");
}

namespace {

// The symmetric padding of "same" for conv, and x padded on the right where
// the left and right amounts differ.
template <size_t D>
std::pair<Tensor, std::array<int64_t, D>> same_input(const Tensor& x, const Tensor& weight,
                                                     const std::array<int64_t, D>& dilation) {
  std::vector<int64_t> kernel, dil(dilation.begin(), dilation.end());
  MINIDL_CHECK(weight.defined() && weight.dim() == static_cast<int64_t>(D) + 2, "conv", D,
               "d: expected a weight with ", D + 2, " dimensions, got ",
               weight.defined() ? shape_str(weight.shape()) : std::string("an undefined tensor"));
  for (size_t i = 0; i < D; ++i) kernel.push_back(weight.size(static_cast<int64_t>(i) + 2));
  const std::vector<int64_t> pads = conv_same_pads(kernel, dil);
  std::array<int64_t, D> symmetric{};
  std::vector<int64_t> extra(2 * D, 0);
  bool asymmetric = false;
  for (size_t i = 0; i < D; ++i) {
    const size_t p = 2 * (D - 1 - i);
    symmetric[i] = pads[p];
    extra[p + 1] = pads[p + 1] - pads[p];  // 0 or 1: the right side gets the odd one
    asymmetric = asymmetric || extra[p + 1] != 0;
  }
  return {asymmetric ? pad(x, extra) : x, symmetric};
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* padding,
              std::array<int64_t, 2> stride, std::array<int64_t, 2> dilation, int64_t groups) {
  check_conv_padding_string(padding, {stride.begin(), stride.end()});
  Conv2dParams p{.stride = stride, .padding = {0, 0}, .dilation = dilation, .groups = groups};
  if (std::string(padding) == "valid") return conv2d(x, weight, bias, p);
  auto [input, symmetric] = same_input<2>(x, weight, dilation);
  p.padding = symmetric;
  return conv2d(input, weight, bias, p);
}

Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* padding,
              std::array<int64_t, 3> stride, std::array<int64_t, 3> dilation, int64_t groups) {
  check_conv_padding_string(padding, {stride.begin(), stride.end()});
  Conv3dParams p{.stride = stride, .padding = {0, 0, 0}, .dilation = dilation, .groups = groups};
  if (std::string(padding) == "valid") return conv3d(x, weight, bias, p);
  auto [input, symmetric] = same_input<3>(x, weight, dilation);
  p.padding = symmetric;
  return conv3d(input, weight, bias, p);
}

ConvExtent conv_extent(const char* op, int dim, int64_t in, int64_t padding, int64_t dilation, int64_t kernel) {
  MINIDL_CHECK(padding <= INT64_MAX / 2, op, ": Given padding=", padding, " at dimension ", dim,
               " , expected padding to be at most ", INT64_MAX / 2);
  ConvExtent e{};
  MINIDL_CHECK(!__builtin_add_overflow(in, 2 * padding, &e.padded), op, ": the padded input size ", in, " + 2 * ",
               padding, " at dimension ", dim, " does not fit int64");
  MINIDL_CHECK(!__builtin_mul_overflow(dilation, kernel - 1, &e.span) && !__builtin_add_overflow(e.span, 1, &e.span),
               op, ": the dilated kernel size ", dilation, " * (", kernel, " - 1) + 1 at dimension ", dim,
               " does not fit int64");
  return e;
}

}  // namespace minidl
