// conv_transpose2d / conv_transpose3d on the convolution kernels, with roles
// swapped. Let conv be the convolution whose input has the transposed
// output's shape and whose output has x's shape, with the same weight
// (C_in, C_out/groups, k...) read as conv's (out_channels, in_channels/groups, k...):
//   y  = conv's grad input of "dy" = x                (plus bias)
//   dx = conv's forward of dy
//   dw = conv's grad weight with "x" = dy and "dy" = x
//   dbias = dy summed over everything but channels
// So the conv2d / conv3d stubs (and every backend that registers them) serve.
#include "minidl/ops/conv_transpose.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/function.h"
#include "minidl/ops/binary.h"
#include "minidl/ops/conv2d.h"
#include "minidl/ops/conv3d.h"
#include "minidl/ops/pad.h"
#include "minidl/ops/reduce.h"

namespace minidl {

namespace {

// The sizes of one call, from the transposed op's point of view.
template <size_t D>
struct Sizes {
  int64_t batch = 1, in_channels = 0, out_channels = 0, groups = 1;
  bool batched = true;
  std::array<int64_t, D> in{}, out{}, kernel{}, stride{}, padding{}, dilation{};

  std::vector<int64_t> to_list() const {
    std::vector<int64_t> v{batch, in_channels, out_channels, groups, batched ? 1 : 0};
    for (const auto* a : {&in, &out, &kernel, &stride, &padding, &dilation}) v.insert(v.end(), a->begin(), a->end());
    return v;
  }
  static Sizes from_list(const std::vector<int64_t>& v) {
    Sizes s;
    s.batch = v[0], s.in_channels = v[1], s.out_channels = v[2], s.groups = v[3], s.batched = v[4] != 0;
    size_t i = 5;
    for (auto* a : {&s.in, &s.out, &s.kernel, &s.stride, &s.padding, &s.dilation})
      for (auto& x : *a) x = v[i++];
    return s;
  }
  // x has an empty image (allowed with an empty batch or no channels): the
  // kernels divide by its size, and nothing is summed.
  bool empty_image() const {
    for (int64_t v : in)
      if (v == 0) return true;
    return false;
  }
  Shape shape(int64_t channels, const std::array<int64_t, D>& spatial) const {
    Shape s;
    if (batched) s.push_back(batch);
    s.push_back(channels);
    s.insert(s.end(), spatial.begin(), spatial.end());
    return s;
  }
};

// The convolution (conv2d for D = 2, conv3d for D = 3) whose grad input is
// the transposed convolution.
Conv2dGeometry conv_geometry(const Sizes<2>& s) {
  Conv2dGeometry g;
  g.batch = s.batch, g.in_channels = s.out_channels, g.out_channels = s.in_channels, g.groups = s.groups;
  g.in_h = s.out[0], g.in_w = s.out[1], g.out_h = s.in[0], g.out_w = s.in[1];
  g.kernel_h = s.kernel[0], g.kernel_w = s.kernel[1], g.stride_h = s.stride[0], g.stride_w = s.stride[1];
  g.pad_h = s.padding[0], g.pad_w = s.padding[1], g.dilation_h = s.dilation[0], g.dilation_w = s.dilation[1];
  return g;
}
Conv3dGeometry conv_geometry(const Sizes<3>& s) {
  Conv3dGeometry g;
  Sizes<2> hw;
  hw.batch = s.batch, hw.in_channels = s.in_channels, hw.out_channels = s.out_channels, hw.groups = s.groups;
  for (size_t i = 0; i < 2; ++i) {
    hw.in[i] = s.in[i + 1], hw.out[i] = s.out[i + 1], hw.kernel[i] = s.kernel[i + 1];
    hw.stride[i] = s.stride[i + 1], hw.padding[i] = s.padding[i + 1], hw.dilation[i] = s.dilation[i + 1];
  }
  g.hw = conv_geometry(hw);
  g.in_d = s.out[0], g.out_d = s.in[0], g.kernel_d = s.kernel[0], g.stride_d = s.stride[0], g.pad_d = s.padding[0];
  g.dilation_d = s.dilation[0];
  return g;
}
auto& forward_stub(const Sizes<2>&) { return conv2d_forward_stub; }
auto& forward_stub(const Sizes<3>&) { return conv3d_forward_stub; }
auto& backward_stub(const Sizes<2>&) { return conv2d_backward_stub; }
auto& backward_stub(const Sizes<3>&) { return conv3d_backward_stub; }

template <size_t D>
struct ConvTranspose : autograd::Function<ConvTranspose<D>> {
  static constexpr const char* kName = D == 2 ? "ConvTranspose2d" : "ConvTranspose3d";

  static Tensor forward(AutogradContext* ctx, const Tensor& x_in, const Tensor& w_in, const Tensor& bias,
                        const Sizes<D>& s) {
    const Tensor x = x_in.contiguous(), w = w_in.contiguous();
    Tensor y = empty(s.shape(s.out_channels, s.out), x.options());
    if (s.empty_image())
      y.zero_();
    else
      backward_stub(s)(x.device())(conv_geometry(s), Tensor(), w, x, y, Tensor(), Tensor());
    if (bias.defined()) {
      Shape b(s.batched ? D + 2 : D + 1, 1);
      b[s.batched ? 1 : 0] = s.out_channels;
      y.add_(bias.reshape(b));
    }
    ctx->save_for_backward({ctx->needs_input_grad(1) ? x : Tensor(), ctx->needs_input_grad(0) ? w : Tensor()});
    ctx->saved_data["sizes"] = s.to_list();
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Sizes<D> s = Sizes<D>::from_list(ctx->saved_data["sizes"].to_int_list());
    const Tensor dy = grads[0].contiguous();
    const auto g = conv_geometry(s);
    Tensor dx, dw, dbias;
    if (ctx->needs_input_grad(0)) {
      dx = empty(s.shape(s.in_channels, s.in), dy.options());
      if (!s.empty_image()) forward_stub(s)(dy.device())(g, dy, saved[1], Tensor(), dx);  // else no elements
    }
    if (ctx->needs_input_grad(1)) {
      Shape ws{s.in_channels, s.out_channels / s.groups};
      ws.insert(ws.end(), s.kernel.begin(), s.kernel.end());
      dw = s.empty_image() ? zeros(ws, dy.options()) : empty(ws, dy.options());
      if (!s.empty_image()) backward_stub(s)(dy.device())(g, dy, Tensor(), saved[0], Tensor(), dw, Tensor());
    }
    if (ctx->needs_input_grad(2)) {
      Shape dims;
      for (int64_t d = 0; d < dy.dim(); ++d)
        if (d != (s.batched ? 1 : 0)) dims.push_back(d);
      dbias = sum(dy, dims);
    }
    return {dx, dw, dbias, Tensor()};
  }
};

template <size_t D>
std::string tuple_str(const std::array<int64_t, D>& a, const char* sep) {
  std::string s;
  for (size_t i = 0; i < D; ++i) s += (i ? sep : "") + std::to_string(a[i]);
  return s;
}

template <size_t D>
Tensor conv_transpose(const char* name, const Tensor& x, const Tensor& weight, const Tensor& bias,
                      const ConvTransposeParams<D>& p) {
  constexpr int64_t kDim = static_cast<int64_t>(D);
  MINIDL_CHECK(x.defined(), name, ": the input tensor is undefined");
  MINIDL_CHECK(weight.defined(), name, ": the weight tensor is undefined");
  MINIDL_CHECK(x.dim() == kDim + 1 || x.dim() == kDim + 2, "Expected ", kDim + 1, "D (unbatched) or ", kDim + 2,
               "D (batched) input to ", name, ", but got input of size: ", shape_str(x.shape()));
  MINIDL_CHECK(weight.dim() == kDim + 2, name, ": expected weight of size (in_channels, out_channels / groups, ",
               D == 2 ? "kH, kW" : "kD, kH, kW", "), but got weight of size ", shape_str(weight.shape()));
  MINIDL_CHECK(is_floating(x.dtype()), name, ": expected a float32 or float64 input, got ", dtype_name(x.dtype()));
  MINIDL_CHECK(x.dtype() == weight.dtype(), "Input type (", dtype_name(x.dtype()), ") and weight type (",
               dtype_name(weight.dtype()), ") should be the same");
  MINIDL_CHECK(x.device() == weight.device(), "Input type (", x.device(), ") and weight type (", weight.device(),
               ") should be on the same device");
  for (size_t i = 0; i < D; ++i) {
    MINIDL_CHECK(p.stride[i] > 0, "non-positive stride is not supported");
    MINIDL_CHECK(p.dilation[i] > 0, "non-positive dilation is not supported");
    MINIDL_CHECK(p.padding[i] >= 0, "negative padding is not supported");
    MINIDL_CHECK(p.output_padding[i] >= 0, "negative output_padding is not supported");
    MINIDL_CHECK(weight.size(static_cast<int64_t>(i) + 2) > 0, name, ": expected a kernel of at least size 1, "
                 "but got weight of size ", shape_str(weight.shape()));
  }
  MINIDL_CHECK(p.groups > 0, "non-positive groups is not supported");
  bool op_ok = true;
  for (size_t i = 0; i < D; ++i) op_ok = op_ok && (p.output_padding[i] < p.stride[i] || p.output_padding[i] < p.dilation[i]);
  if (!op_ok) {
    static const char* kNames[] = {"depth", "height", "width"};
    std::string msg = "output padding must be smaller than either stride or dilation, but got";
    for (const char* what : {"output_padding", "stride", "dilation"}) {
      const auto& a = std::string(what) == "output_padding" ? p.output_padding
                      : std::string(what) == "stride"       ? p.stride
                                                            : p.dilation;
      for (size_t i = 0; i < D; ++i) msg += std::string(" ") + what + "_" + kNames[3 - D + i] + ": " + std::to_string(a[i]);
    }
    MINIDL_CHECK(false, msg);
  }

  Sizes<D> s;
  s.batched = x.dim() == kDim + 2;
  s.batch = s.batched ? x.size(0) : 1;
  s.in_channels = x.size(-kDim - 1);
  s.groups = p.groups;
  const std::string w_str = shape_str(weight.shape());
  MINIDL_CHECK(weight.size(0) % p.groups == 0, "Given groups=", p.groups, ", expected weight to be divisible by ",
               p.groups, " at dimension 0, but got weight of size ", w_str, " instead");
  Shape batched_shape = x.shape();
  if (!s.batched) batched_shape.insert(batched_shape.begin(), 1);
  MINIDL_CHECK(s.in_channels == weight.size(0), "Given transposed=1, weight of size ", w_str, ", expected input",
               shape_str(batched_shape), " to have ", weight.size(0), " channels, but got ", s.in_channels,
               " channels instead");
  s.out_channels = weight.size(1) * p.groups;
  if (bias.defined()) {
    MINIDL_CHECK(bias.dtype() == x.dtype(), "Input type (", dtype_name(x.dtype()), ") and bias type (",
                 dtype_name(bias.dtype()), ") should be the same");
    MINIDL_CHECK(bias.device() == x.device(), "Input type (", x.device(), ") and bias type (", bias.device(),
                 ") should be on the same device");
    MINIDL_CHECK(bias.dim() == 1 && bias.size(0) == s.out_channels, "Given transposed=1, weight of size ", w_str,
                 ", expected bias to be 1-dimensional with ", s.out_channels, " elements, but got bias of size ",
                 shape_str(bias.shape()), " instead");
  }
  for (size_t i = 0; i < D; ++i)
    MINIDL_CHECK(p.padding[i] <= INT64_MAX / 2, name, ": Given padding=", p.padding[i], " at dimension ", i,
                 " , expected padding to be at most ", INT64_MAX / 2);
  // As PyTorch: an empty image is refused unless the batch or the channels are
  // empty (the kernels divide by the input plane size).
  bool empty_image = false;
  for (size_t i = 0; i < D; ++i) empty_image = empty_image || x.size(static_cast<int64_t>(i) - kDim) == 0;
  MINIDL_CHECK(!empty_image || s.batch == 0 || s.in_channels == 0, name,
               ": Only zero batch or zero channel inputs are supported, but got input shape: ",
               shape_str(batched_shape));
  // whole: the output before cropping the padding, (in - 1) * stride + dilation * (kernel - 1) + 1;
  // huge strides or dilations make it overflow int64.
  std::array<int64_t, D> whole_out{};
  bool positive = true;
  for (size_t i = 0; i < D; ++i) {
    s.in[i] = x.size(static_cast<int64_t>(i) - kDim);
    s.kernel[i] = weight.size(static_cast<int64_t>(i) + 2);
    s.stride[i] = p.stride[i], s.padding[i] = p.padding[i], s.dilation[i] = p.dilation[i];
    int64_t strided = 0, span = 0, whole = 0, out = 0;
    const bool overflow = __builtin_mul_overflow(s.in[i] - 1, s.stride[i], &strided) ||
                          __builtin_mul_overflow(s.dilation[i], s.kernel[i] - 1, &span) ||
                          __builtin_add_overflow(strided, span, &whole) || __builtin_add_overflow(whole, 1, &whole) ||
                          __builtin_add_overflow(whole, p.output_padding[i] - 2 * s.padding[i], &out);
    MINIDL_CHECK(!overflow, name, ": the calculated output size (", s.in[i], " - 1) * stride ", s.stride[i],
                 " - 2 * padding ", s.padding[i], " + dilation ", s.dilation[i], " * (kernel ", s.kernel[i],
                 " - 1) + output_padding ", p.output_padding[i], " + 1 does not fit int64");
    whole_out[i] = whole;
    s.out[i] = out;
    positive = positive && s.out[i] > 0;
  }
  MINIDL_CHECK(positive, "Given input size per channel: (", tuple_str(s.in, " x "),
               "). Calculated output size per channel: (", tuple_str(s.out, " x "), "). Output size is too small");
  bool consistent = true;  // the convolution of the output size gives back x's size
  for (size_t i = 0; i < D; ++i) consistent = consistent && p.output_padding[i] < p.stride[i];
  if (consistent) return ConvTranspose<D>::apply(x, weight, bias, s);
  // output_padding >= stride (allowed while < dilation): the kernels need
  // sizes the convolution maps back to x's, so compute the whole output
  // (padding 0, which always is), then crop the padding and add zeros past its end.
  Sizes<D> full = s;
  std::vector<int64_t> pads;
  for (size_t i = 0; i < D; ++i) full.padding[i] = 0, full.out[i] = whole_out[i];
  for (size_t i = D; i-- > 0;) {
    pads.push_back(-s.padding[i]);
    pads.push_back(p.output_padding[i] - s.padding[i]);  // s.out - (full.out - padding), without overflow
  }
  Tensor y = pad(ConvTranspose<D>::apply(x, weight, Tensor(), full), pads);
  if (!bias.defined()) return y;
  Shape b(s.batched ? D + 2 : D + 1, 1);
  b[s.batched ? 1 : 0] = s.out_channels;
  return y + bias.reshape(b);
}

}  // namespace

Tensor conv_transpose2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                        const ConvTranspose2dParams& params) {
  const auto cast = amp::cast_args(amp::AmpOp::conv_transpose2d, x_in, weight_in, bias_in);
  const Tensor &x = cast[0], &weight = cast[1], &bias = cast[2];
  return conv_transpose<2>("conv_transpose2d", x, weight, bias, params);
}

Tensor conv_transpose3d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                        const ConvTranspose3dParams& params) {
  const auto cast = amp::cast_args(amp::AmpOp::conv_transpose3d, x_in, weight_in, bias_in);
  const Tensor &x = cast[0], &weight = cast[1], &bias = cast[2];
  return conv_transpose<3>("conv_transpose3d", x, weight, bias, params);
}

}  // namespace minidl
