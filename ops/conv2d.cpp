// conv2d: 2-D cross-correlation (as PyTorch), NCHW, with stride, padding,
// dilation and groups; x may be unbatched (C, H, W).
//   y[n][k][i][j] = bias[k] + sum_{c, kh, kw} w[k][c][kh][kw] * xpad[n][g(k)*Cg + c][i*sh + kh*dh][j*sw + kw*dw]
//   dx = dy convolved back through w (the transposed convolution)
//   dw[k][c][kh][kw] = sum_{n, i, j} dy[n][k][i][j] * xpad[n][g(k)*Cg + c][i*sh + kh*dh][j*sw + kw*dw]
//   dbias[k] = sum_{n, i, j} dy[n][k][i][j]
// Forward saves x (when w needs a grad) and w (when x needs one), plus the
// geometry. A channels-last input (or weight) makes a channels-last conv:
// x, w, y, dy, dx in NHWC (g.channels_last), dw returned in the weight's
// layout. Gradients overwrite (new tensors); the engine accumulates.
// The CPU kernels: ops/cpu/conv2d.cpp registers them; ops/cpu/conv2d_kernels.cpp
// has the rule that picks a path, ops/cpu/conv2d_shifted.cpp the implicit GEMM
// over shifted planes (for big maps), ops/cpu/conv2d_im2col.cpp the GEMM over a
// chunk of images, skipping padding taps (for small maps), and
// ops/cpu/conv2d_winograd.cpp Winograd F(2x2, 3x3) for 3x3 stride-1 kernels
// with many channels; the last two share the packed GEMM of ops/cpu/conv2d_gemm.h.
#include "minidl/ops/conv2d.h"

#include <vector>

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/function.h"
#include "minidl/ops/conv_padding.h"

namespace minidl {

DispatchStub<Conv2dForwardFn> conv2d_forward_stub("conv2d");
DispatchStub<Conv2dBackwardFn> conv2d_backward_stub("conv2d_backward");

namespace {

Tensor nchw_copy(const Tensor& t) { return t.defined() ? t.detach().contiguous() : t; }
Tensor nchw_like(const Tensor& t) { return t.defined() ? empty(t.shape(), t.options()) : t; }
void write_back(const Tensor& dst, const Tensor& src) {
  if (dst.defined()) Tensor(dst).copy_(src);
}
Conv2dGeometry as_nchw(Conv2dGeometry g) {
  g.channels_last = false;
  return g;
}

}  // namespace

void conv2d_forward_nchw_copies(Conv2dForwardFn* nchw, const Conv2dGeometry& g, const Tensor& x, const Tensor& w,
                                const Tensor& bias, const Tensor& y) {
  if (!g.channels_last) return nchw(g, x, w, bias, y);
  const Tensor yc = nchw_like(y);
  nchw(as_nchw(g), nchw_copy(x), nchw_copy(w), bias, yc);
  write_back(y, yc);
}

void conv2d_backward_nchw_copies(Conv2dBackwardFn* nchw, const Conv2dGeometry& g, const Tensor& x, const Tensor& w,
                                 const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  if (!g.channels_last) return nchw(g, x, w, dy, dx, dw, dbias);
  const Tensor dxc = nchw_like(dx), dwc = nchw_like(dw);
  nchw(as_nchw(g), nchw_copy(x), nchw_copy(w), nchw_copy(dy), dxc, dwc, dbias);
  write_back(dx, dxc);
  write_back(dw, dwc);
}

void conv2d_set_output_size(Conv2dGeometry& g) {
  g.out_h = (g.in_h + 2 * g.pad_h - g.dilation_h * (g.kernel_h - 1) - 1) / g.stride_h + 1;
  g.out_w = (g.in_w + 2 * g.pad_w - g.dilation_w * (g.kernel_w - 1) - 1) / g.stride_w + 1;
}

namespace {

std::vector<int64_t> to_list(const Conv2dGeometry& g) {
  return {g.batch,    g.in_channels, g.in_h,     g.in_w,     g.out_channels, g.out_h,      g.out_w,      g.kernel_h,
          g.kernel_w, g.stride_h,    g.stride_w, g.pad_h,    g.pad_w,        g.dilation_h, g.dilation_w, g.groups,
          g.channels_last};
}

Conv2dGeometry from_list(const std::vector<int64_t>& v) {
  Conv2dGeometry g;
  g.batch = v[0], g.in_channels = v[1], g.in_h = v[2], g.in_w = v[3];
  g.out_channels = v[4], g.out_h = v[5], g.out_w = v[6], g.kernel_h = v[7], g.kernel_w = v[8];
  g.stride_h = v[9], g.stride_w = v[10], g.pad_h = v[11], g.pad_w = v[12];
  g.dilation_h = v[13], g.dilation_w = v[14], g.groups = v[15];
  g.channels_last = v[16] != 0;
  return g;
}

// Shape of y (or x) for a batched or unbatched call.
Shape nchw(bool batched, int64_t n, int64_t c, int64_t h, int64_t w) {
  return batched ? Shape{n, c, h, w} : Shape{c, h, w};
}

MemoryFormat format_of(const Conv2dGeometry& g) {
  return g.channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

struct Conv2d : autograd::Function<Conv2d> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in,
                        const Conv2dGeometry& g) {
    // g.channels_last: w is converted here (and saved so), dw back to w_in's layout.
    const MemoryFormat fmt = format_of(g);
    const Tensor x = x_in.contiguous(fmt), w = w_in.contiguous(fmt);
    const Tensor bias = bias_in.defined() ? bias_in.contiguous() : Tensor();
    Tensor y = empty(nchw(x.dim() == 4, g.batch, g.out_channels, g.out_h, g.out_w), x.options(), fmt);
    conv2d_forward_stub(x.device())(g, x, w, bias, y);
    ctx->save_for_backward({ctx->needs_input_grad(1) ? x : Tensor(), ctx->needs_input_grad(0) ? w : Tensor()});
    ctx->saved_data["geometry"] = to_list(g);
    ctx->saved_data["batched"] = x.dim() == 4;
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.dtype());
    ctx->saved_data["weight_format"] = static_cast<int64_t>(w_in.suggest_memory_format());
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Conv2dGeometry g = from_list(ctx->saved_data["geometry"].to_int_list());
    const bool batched = ctx->saved_data["batched"].to_bool();
    const MemoryFormat fmt = format_of(g);
    const Tensor dy = grads[0].contiguous(fmt);
    const TensorOptions opts = dy.options();
    const int64_t Cg = g.in_channels / g.groups;
    Tensor dx = ctx->needs_input_grad(0)
                    ? empty(nchw(batched, g.batch, g.in_channels, g.in_h, g.in_w), opts, fmt)
                    : Tensor();
    Tensor dw = ctx->needs_input_grad(1) ? empty({g.out_channels, Cg, g.kernel_h, g.kernel_w}, opts, fmt) : Tensor();
    Tensor dbias = ctx->needs_input_grad(2) ? empty({g.out_channels}, opts) : Tensor();
    conv2d_backward_stub(dy.device())(g, saved[0], saved[1], dy, dx, dw, dbias);
    if (dw.defined()) dw = dw.contiguous(static_cast<MemoryFormat>(ctx->saved_data["weight_format"].to_int()));
    return {dx, dw, dbias, Tensor()};
  }
};

// "[2, 4, 32, 32]" for the batched view of x, as PyTorch prints it.
std::string batched_str(const Tensor& x) {
  Shape s = x.shape();
  if (s.size() == 3) s.insert(s.begin(), 1);
  return shape_str(s);
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, const Conv2dParams& params) {
  const auto cast = amp::cast_args(amp::AmpOp::conv2d, x_in, weight_in, bias_in);
  const Tensor &x = cast[0], &weight = cast[1], &bias = cast[2];
  MINIDL_CHECK(x.defined(), "conv2d: the input tensor is undefined");
  MINIDL_CHECK(weight.defined(), "conv2d: the weight tensor is undefined");
  MINIDL_CHECK(x.dim() == 3 || x.dim() == 4,
               "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: ",
               shape_str(x.shape()));
  MINIDL_CHECK(weight.dim() == 4,
               "conv2d: expected weight of size (out_channels, in_channels / groups, kH, kW), but got weight of "
               "size ",
               shape_str(weight.shape()));
  MINIDL_CHECK(weight.size(2) > 0 && weight.size(3) > 0, "conv2d: expected a kernel of at least 1 x 1, but got weight of size ",
               shape_str(weight.shape()));
  MINIDL_CHECK(is_floating(x.dtype()), "conv2d: expected a float32 or float64 input, got ", dtype_name(x.dtype()));
  MINIDL_CHECK(x.dtype() == weight.dtype(), "Input type (", dtype_name(x.dtype()), ") and weight type (",
               dtype_name(weight.dtype()), ") should be the same");
  MINIDL_CHECK(x.device() == weight.device(), "Input type (", x.device(), ") and weight type (", weight.device(),
               ") should be on the same device");
  const auto& [sh, sw] = params.stride;
  const auto& [ph, pw] = params.padding;
  const auto& [dh, dw] = params.dilation;
  const int64_t groups = params.groups;
  MINIDL_CHECK(sh > 0 && sw > 0, "non-positive stride is not supported");
  MINIDL_CHECK(dh > 0 && dw > 0, "non-positive dilation is not supported");
  MINIDL_CHECK(ph >= 0 && pw >= 0, "negative padding is not supported");
  MINIDL_CHECK(groups > 0, "non-positive groups is not supported");

  const bool batched = x.dim() == 4;
  Conv2dGeometry g;
  g.batch = batched ? x.size(0) : 1;
  g.in_channels = x.size(-3), g.in_h = x.size(-2), g.in_w = x.size(-1);
  g.out_channels = weight.size(0), g.kernel_h = weight.size(2), g.kernel_w = weight.size(3);
  g.stride_h = sh, g.stride_w = sw, g.pad_h = ph, g.pad_w = pw, g.dilation_h = dh, g.dilation_w = dw;
  g.groups = groups;
  const std::string w_str = shape_str(weight.shape());
  MINIDL_CHECK(g.out_channels >= groups, "Given groups=", groups, ", expected weight to be at least ", groups,
               " at dimension 0, but got weight of size ", w_str, " instead");
  MINIDL_CHECK(g.out_channels % groups == 0, "Given groups=", groups, ", expected weight to be divisible by ",
               groups, " at dimension 0, but got weight of size ", w_str, " instead");
  MINIDL_CHECK(g.in_channels == weight.size(1) * groups, "Given groups=", groups, ", weight of size ", w_str,
               ", expected input", batched_str(x), " to have ", weight.size(1) * groups,
               " channels, but got ", g.in_channels, " channels instead");
  if (bias.defined()) {
    MINIDL_CHECK(bias.dtype() == x.dtype(), "Input type (", dtype_name(x.dtype()), ") and bias type (",
                 dtype_name(bias.dtype()), ") should be the same");
    MINIDL_CHECK(bias.device() == x.device(), "Input type (", x.device(), ") and bias type (", bias.device(),
                 ") should be on the same device");
    MINIDL_CHECK(bias.dim() == 1 && bias.size(0) == g.out_channels, "Given weight of size ", w_str,
                 ", expected bias to be 1-dimensional with ", g.out_channels, " elements, but got bias of size ",
                 shape_str(bias.shape()), " instead");
  }
  const ConvExtent eh = conv_extent("conv2d", 0, g.in_h, ph, dh, g.kernel_h);
  const ConvExtent ew = conv_extent("conv2d", 1, g.in_w, pw, dw, g.kernel_w);
  const int64_t padded_h = eh.padded, padded_w = ew.padded, span_h = eh.span, span_w = ew.span;
  MINIDL_CHECK(padded_h >= span_h && padded_w >= span_w, "Calculated padded input size per channel: (", padded_h,
               " x ", padded_w, "). Kernel size: (", span_h, " x ", span_w,
               "). Kernel size can't be greater than actual input size");
  // As PyTorch: an empty image is refused unless the batch or the channels are
  // empty (the kernels divide by the output plane size).
  MINIDL_CHECK(g.batch == 0 || g.in_channels == 0 || (g.in_h > 0 && g.in_w > 0),
               "conv2d: Only zero batch or zero channel inputs are supported, but got input shape: ", batched_str(x));
  conv2d_set_output_size(g);
  MINIDL_CHECK(g.out_h > 0 && g.out_w > 0, "Given input size per channel: (", g.in_h, " x ", g.in_w,
               "). Calculated output size per channel: (", g.out_h, " x ", g.out_w, "). Output size is too small");
  // As PyTorch's cuDNN convs: channels-last when the input or the weight is.
  g.channels_last = batched && (x.suggest_memory_format() == MemoryFormat::ChannelsLast ||
                                weight.suggest_memory_format() == MemoryFormat::ChannelsLast);
  return Conv2d::apply(x, weight, bias, g);
}

}  // namespace minidl
