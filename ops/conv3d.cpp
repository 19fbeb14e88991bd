// conv3d: 3-D cross-correlation (as PyTorch), NCDHW, with stride, padding,
// dilation and groups; x may be unbatched (C, D, H, W).
//   y[n][k][d][i][j] = bias[k] + sum_{c, kd, kh, kw} w[k][c][kd][kh][kw] *
//                      xpad[n][g(k)*Cg + c][d*sd + kd*dd][i*sh + kh*dh][j*sw + kw*dw]
// Same structure as ops/conv2d.cpp: forward saves x (when w needs a grad) and
// w (when x needs one) plus the geometry; the CPU kernels are in
// ops/cpu/conv3d.cpp (conv2d's kernels applied to depth slices).
#include "minidl/ops/conv3d.h"

#include <vector>

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/function.h"
#include "minidl/ops/conv_padding.h"

namespace minidl {

DispatchStub<Conv3dForwardFn> conv3d_forward_stub("conv3d");
DispatchStub<Conv3dBackwardFn> conv3d_backward_stub("conv3d_backward");

void conv3d_set_output_size(Conv3dGeometry& g) {
  conv2d_set_output_size(g.hw);
  g.out_d = (g.in_d + 2 * g.pad_d - g.dilation_d * (g.kernel_d - 1) - 1) / g.stride_d + 1;
}

namespace {

std::vector<int64_t> to_list(const Conv3dGeometry& g) {
  const Conv2dGeometry& h = g.hw;
  return {h.batch,    h.in_channels, h.in_h,       h.in_w,       h.out_channels, h.out_h,  h.out_w,
          h.kernel_h, h.kernel_w,    h.stride_h,   h.stride_w,   h.pad_h,        h.pad_w,  h.dilation_h,
          h.dilation_w, h.groups,    g.in_d,       g.out_d,      g.kernel_d,     g.stride_d, g.pad_d,
          g.dilation_d};
}

Conv3dGeometry from_list(const std::vector<int64_t>& v) {
  Conv3dGeometry g;
  Conv2dGeometry& h = g.hw;
  h.batch = v[0], h.in_channels = v[1], h.in_h = v[2], h.in_w = v[3];
  h.out_channels = v[4], h.out_h = v[5], h.out_w = v[6], h.kernel_h = v[7], h.kernel_w = v[8];
  h.stride_h = v[9], h.stride_w = v[10], h.pad_h = v[11], h.pad_w = v[12];
  h.dilation_h = v[13], h.dilation_w = v[14], h.groups = v[15];
  g.in_d = v[16], g.out_d = v[17], g.kernel_d = v[18], g.stride_d = v[19], g.pad_d = v[20], g.dilation_d = v[21];
  return g;
}

Shape ncdhw(bool batched, int64_t n, int64_t c, int64_t d, int64_t h, int64_t w) {
  return batched ? Shape{n, c, d, h, w} : Shape{c, d, h, w};
}

struct Conv3d : autograd::Function<Conv3d> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in,
                        const Conv3dGeometry& g) {
    const Tensor x = x_in.contiguous(), w = w_in.contiguous();
    const Tensor bias = bias_in.defined() ? bias_in.contiguous() : Tensor();
    Tensor y = empty(ncdhw(x.dim() == 5, g.hw.batch, g.hw.out_channels, g.out_d, g.hw.out_h, g.hw.out_w),
                     x.options());
    conv3d_forward_stub(x.device())(g, x, w, bias, y);
    ctx->save_for_backward({ctx->needs_input_grad(1) ? x : Tensor(), ctx->needs_input_grad(0) ? w : Tensor()});
    ctx->saved_data["geometry"] = to_list(g);
    ctx->saved_data["batched"] = x.dim() == 5;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Conv3dGeometry g = from_list(ctx->saved_data["geometry"].to_int_list());
    const Conv2dGeometry& h = g.hw;
    const bool batched = ctx->saved_data["batched"].to_bool();
    const Tensor dy = grads[0].contiguous();
    const TensorOptions opts = dy.options();
    Tensor dx = ctx->needs_input_grad(0)
                    ? empty(ncdhw(batched, h.batch, h.in_channels, g.in_d, h.in_h, h.in_w), opts)
                    : Tensor();
    Tensor dw = ctx->needs_input_grad(1)
                    ? empty({h.out_channels, h.in_channels / h.groups, g.kernel_d, h.kernel_h, h.kernel_w}, opts)
                    : Tensor();
    Tensor dbias = ctx->needs_input_grad(2) ? empty({h.out_channels}, opts) : Tensor();
    conv3d_backward_stub(dy.device())(g, saved[0], saved[1], dy, dx, dw, dbias);
    return {dx, dw, dbias, Tensor()};
  }
};

std::string batched_str(const Tensor& x) {
  Shape s = x.shape();
  if (s.size() == 4) s.insert(s.begin(), 1);
  return shape_str(s);
}

}  // namespace

Tensor conv3d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, const Conv3dParams& params) {
  const auto cast = amp::cast_args(amp::AmpOp::conv3d, x_in, weight_in, bias_in);
  const Tensor &x = cast[0], &weight = cast[1], &bias = cast[2];
  MINIDL_CHECK(x.defined(), "conv3d: the input tensor is undefined");
  MINIDL_CHECK(weight.defined(), "conv3d: the weight tensor is undefined");
  MINIDL_CHECK(x.dim() == 4 || x.dim() == 5,
               "Expected 4D (unbatched) or 5D (batched) input to conv3d, but got input of size: ",
               shape_str(x.shape()));
  MINIDL_CHECK(weight.dim() == 5,
               "conv3d: expected weight of size (out_channels, in_channels / groups, kD, kH, kW), but got weight "
               "of size ",
               shape_str(weight.shape()));
  MINIDL_CHECK(weight.size(2) > 0 && weight.size(3) > 0 && weight.size(4) > 0,
               "conv3d: expected a kernel of at least 1 x 1 x 1, but got weight of size ", shape_str(weight.shape()));
  MINIDL_CHECK(is_floating(x.dtype()), "conv3d: expected a float32 or float64 input, got ", dtype_name(x.dtype()));
  MINIDL_CHECK(x.dtype() == weight.dtype(), "Input type (", dtype_name(x.dtype()), ") and weight type (",
               dtype_name(weight.dtype()), ") should be the same");
  MINIDL_CHECK(x.device() == weight.device(), "Input type (", x.device(), ") and weight type (", weight.device(),
               ") should be on the same device");
  const auto& [sd, sh, sw] = params.stride;
  const auto& [pd, ph, pw] = params.padding;
  const auto& [dd, dh, dw] = params.dilation;
  const int64_t groups = params.groups;
  MINIDL_CHECK(sd > 0 && sh > 0 && sw > 0, "non-positive stride is not supported");
  MINIDL_CHECK(dd > 0 && dh > 0 && dw > 0, "non-positive dilation is not supported");
  MINIDL_CHECK(pd >= 0 && ph >= 0 && pw >= 0, "negative padding is not supported");
  MINIDL_CHECK(groups > 0, "non-positive groups is not supported");

  const bool batched = x.dim() == 5;
  Conv3dGeometry g;
  Conv2dGeometry& h = g.hw;
  h.batch = batched ? x.size(0) : 1;
  h.in_channels = x.size(-4), g.in_d = x.size(-3), h.in_h = x.size(-2), h.in_w = x.size(-1);
  h.out_channels = weight.size(0), g.kernel_d = weight.size(2), h.kernel_h = weight.size(3),
  h.kernel_w = weight.size(4);
  g.stride_d = sd, h.stride_h = sh, h.stride_w = sw, g.pad_d = pd, h.pad_h = ph, h.pad_w = pw;
  g.dilation_d = dd, h.dilation_h = dh, h.dilation_w = dw, h.groups = groups;
  const std::string w_str = shape_str(weight.shape());
  MINIDL_CHECK(h.out_channels >= groups, "Given groups=", groups, ", expected weight to be at least ", groups,
               " at dimension 0, but got weight of size ", w_str, " instead");
  MINIDL_CHECK(h.out_channels % groups == 0, "Given groups=", groups, ", expected weight to be divisible by ",
               groups, " at dimension 0, but got weight of size ", w_str, " instead");
  MINIDL_CHECK(h.in_channels == weight.size(1) * groups, "Given groups=", groups, ", weight of size ", w_str,
               ", expected input", batched_str(x), " to have ", weight.size(1) * groups, " channels, but got ",
               h.in_channels, " channels instead");
  if (bias.defined()) {
    MINIDL_CHECK(bias.dtype() == x.dtype(), "Input type (", dtype_name(x.dtype()), ") and bias type (",
                 dtype_name(bias.dtype()), ") should be the same");
    MINIDL_CHECK(bias.device() == x.device(), "Input type (", x.device(), ") and bias type (", bias.device(),
                 ") should be on the same device");
    MINIDL_CHECK(bias.dim() == 1 && bias.size(0) == h.out_channels, "Given weight of size ", w_str,
                 ", expected bias to be 1-dimensional with ", h.out_channels, " elements, but got bias of size ",
                 shape_str(bias.shape()), " instead");
  }
  const ConvExtent ed = conv_extent("conv3d", 0, g.in_d, pd, dd, g.kernel_d);
  const ConvExtent eh = conv_extent("conv3d", 1, h.in_h, ph, dh, h.kernel_h);
  const ConvExtent ew = conv_extent("conv3d", 2, h.in_w, pw, dw, h.kernel_w);
  const int64_t padded_d = ed.padded, padded_h = eh.padded, padded_w = ew.padded;
  const int64_t span_d = ed.span, span_h = eh.span, span_w = ew.span;
  MINIDL_CHECK(padded_d >= span_d && padded_h >= span_h && padded_w >= span_w,
               "Calculated padded input size per channel: (", padded_d, " x ", padded_h, " x ", padded_w,
               "). Kernel size: (", span_d, " x ", span_h, " x ", span_w,
               "). Kernel size can't be greater than actual input size");
  // As PyTorch: an empty volume is refused unless the batch or the channels are
  // empty (the kernels divide by the output plane size).
  MINIDL_CHECK(h.batch == 0 || h.in_channels == 0 || (g.in_d > 0 && h.in_h > 0 && h.in_w > 0),
               "conv3d: Only zero batch or zero channel inputs are supported, but got input shape: ", batched_str(x));
  conv3d_set_output_size(g);
  MINIDL_CHECK(g.out_d > 0 && h.out_h > 0 && h.out_w > 0, "Given input size per channel: (", g.in_d, " x ", h.in_h,
               " x ", h.in_w, "). Calculated output size per channel: (", g.out_d, " x ", h.out_h, " x ", h.out_w,
               "). Output size is too small");
  return Conv3d::apply(x, weight, bias, g);
}

}  // namespace minidl
