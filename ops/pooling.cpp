// 2-D and 3-D pooling over N,C,(D,)H,W input (or unbatched); each of the N*C
// planes is independent. A 2-D pool is a 3-D pool with D = 1 and a 1-deep window,
// so both share one geometry (PoolGeometry) and one set of kernels.
//   max_pool:  y[o] = max over the window starting at o*s - pad with taps k, spaced by
//              dilation; padding acts as -inf. Forward saves the argmax (flat index in
//              the plane, first max on ties, NaN wins). Backward: dx[argmax] += dy.
//   avg_pool:  y = sum(window) / divisor; divisor = divisor_override if given, else the
//              window size clipped to the padded input (count_include_pad) or to the
//              input. Backward spreads dy / divisor over the window. Saves only sizes.
//   ceil_mode: output size rounds up, but the last window must start inside the input
//              or its left padding (PyTorch's rule); windows are clipped as above.
//   adaptive_*: output bin i covers [floor(i*in/out), ceil((i+1)*in/out)) (PyTorch's
//              bins); avg divides by the bin volume, max saves the argmax like max_pool.
//   channels-last: a 4-D input whose strides suggest NHWC is pooled as it lies
//              (g.channels_last = C; PyTorch's suggest_memory_format rule), its
//              output, indices and gradient channels-last too: a channels-last
//              network stays so through its pools.
// Backward returns a fresh gradient tensor (the engine accumulates it).
// CPU kernels: ops/cpu/pooling.cpp (planes), ops/cpu/pooling_channels_last.cpp.
#include "minidl/ops/pooling.h"

#include <algorithm>
#include <string>

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/function.h"

namespace minidl {

DispatchStub<MaxPoolForwardFn> max_pool_forward_stub("max_pool");
DispatchStub<MaxPoolBackwardFn> max_pool_backward_stub("max_pool_backward");
DispatchStub<AvgPoolForwardFn> avg_pool_forward_stub("avg_pool");
DispatchStub<AvgPoolBackwardFn> avg_pool_backward_stub("avg_pool_backward");

std::vector<int64_t> PoolGeometry::to_list() const {
  std::vector<int64_t> v{planes};
  for (const Size3* a : {&in, &out, &kernel, &stride, &padding, &dilation}) v.insert(v.end(), a->begin(), a->end());
  v.push_back(adaptive);
  v.push_back(count_include_pad);
  v.push_back(divisor_override);
  v.push_back(channels_last);
  return v;
}

int64_t PoolGeometry::taps_per_output() const {
  if (!adaptive) return kernel[0] * kernel[1] * kernel[2];
  int64_t n = 1;
  for (int i = 0; i < 3; ++i) n *= in[i] / std::max<int64_t>(out[i], 1) + 1;
  return n;
}

PoolGeometry PoolGeometry::from_list(const std::vector<int64_t>& v) {
  PoolGeometry g;
  size_t i = 0;
  g.planes = v[i++];
  for (Size3* a : {&g.in, &g.out, &g.kernel, &g.stride, &g.padding, &g.dilation})
    for (int64_t& e : *a) e = v[i++];
  g.adaptive = v[i++] != 0;
  g.count_include_pad = v[i++] != 0;
  g.divisor_override = v[i++];
  g.channels_last = v[i++];
  return g;
}

namespace {

// ---- autograd ------------------------------------------------------------------

// Batch dims of x, then the nd pooled sizes.
Shape output_shape(const Tensor& x, const PoolGeometry& g, int nd) {
  Shape s(x.shape().begin(), x.shape().end() - nd);
  for (int i = 3 - nd; i < 3; ++i) s.push_back(g.out[i]);
  return s;
}

MemoryFormat layout_of(const PoolGeometry& g) {
  return g.channels_last > 0 ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

// The kernels overwrite every element of dx, except when the output is empty.
Tensor input_grad_buffer(AutogradContext* ctx, const Tensor& gy, const PoolGeometry& g) {
  const Shape shape = ctx->saved_data["input_shape"].to_int_list();
  Tensor gx = empty(shape, gy.options(), layout_of(g));
  if (gy.numel() == 0) gx.zero_();
  return gx;
}

struct MaxPoolFunction : autograd::Function<MaxPoolFunction> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const PoolGeometry& g, int64_t nd) {
    const MemoryFormat fmt = layout_of(g);
    Tensor y = empty(output_shape(x, g, static_cast<int>(nd)), x.options(), fmt);
    Tensor indices = empty(y.shape(), x.options().dtype(kInt64), fmt);
    if (y.numel() > 0) max_pool_forward_stub(x.device())(x.contiguous(fmt), y, indices, g);
    ctx->save_for_backward({indices});
    ctx->mark_non_differentiable({indices});
    ctx->saved_data["geometry"] = g.to_list();
    ctx->saved_data["input_shape"] = x.shape();
    return {y, indices};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor indices = ctx->get_saved_variables()[0];
    const auto g = PoolGeometry::from_list(ctx->saved_data["geometry"].to_int_list());
    const Tensor gy = grads[0].contiguous(layout_of(g));
    Tensor gx = input_grad_buffer(ctx, gy, g);
    if (gy.numel() > 0) max_pool_backward_stub(gy.device())(gy, indices, gx, g);
    return {gx, Tensor(), Tensor()};
  }
};

struct AvgPoolFunction : autograd::Function<AvgPoolFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const PoolGeometry& g, int64_t nd) {
    const MemoryFormat fmt = layout_of(g);
    Tensor y = empty(output_shape(x, g, static_cast<int>(nd)), x.options(), fmt);
    if (y.numel() > 0) avg_pool_forward_stub(x.device())(x.contiguous(fmt), y, g);
    ctx->saved_data["geometry"] = g.to_list();
    ctx->saved_data["input_shape"] = x.shape();
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto g = PoolGeometry::from_list(ctx->saved_data["geometry"].to_int_list());
    const Tensor gy = grads[0].contiguous(layout_of(g));
    Tensor gx = input_grad_buffer(ctx, gy, g);
    if (gy.numel() > 0) avg_pool_backward_stub(gy.device())(gy, gx, g);
    return {gx, Tensor(), Tensor()};
  }
};

// ---- argument checks -----------------------------------------------------------------

// floor(a / b) for b > 0, as PyTorch's div_rtn (a may be negative).
int64_t div_floor(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// PyTorch's pooling_output_shape: with ceil_mode the last window must start
// inside the input or its left padding.
int64_t pooled_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  int64_t out = div_floor(in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0), stride) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// The last nd entries of a, joined by sep: "4x5x5".
std::string join(const Size3& a, int nd, const char* sep) {
  std::string s;
  for (int i = 3 - nd; i < 3; ++i) {
    if (i > 3 - nd) s.append(sep);
    s.append(std::to_string(a[i]));
  }
  return s;
}

// Input rank, non-empty non-batch dims, dtype; nd = 2 or 3 pooled dims.
void check_input(const Tensor& x, int nd, const char* op) {
  MINIDL_CHECK(x.defined(), op, ": expected a defined input tensor");
  const bool ok_dims = x.dim() == nd + 1 || x.dim() == nd + 2;
  if (nd == 2) {
    bool non_empty = ok_dims;
    for (int64_t d = x.dim() - 3; ok_dims && d < x.dim(); ++d) non_empty = non_empty && x.size(d) > 0;
    MINIDL_CHECK(ok_dims && non_empty, op,
                 ": Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, but got:",
                 shape_str(x.shape()));
  } else {
    MINIDL_CHECK(ok_dims, op, ": non-empty 4D or 5D (batch mode) tensor expected for input, but got: ",
                 shape_str(x.shape()));
    for (int64_t d = x.dim() - 4; d < x.dim(); ++d)
      MINIDL_CHECK(x.size(d) > 0, op,
                   ": Expected input to have non-zero size for non-batch dimensions, but input has sizes ",
                   shape_str(x.shape()), " with dimension ", d, " being empty");
  }
  MINIDL_CHECK(is_floating(x.dtype()), op, ": expected a floating point input, got ", dtype_name(x.dtype()));
}

// C for a batched 2-D input laid out NHWC (PyTorch's suggest_memory_format),
// else 0: the kernels pool such an input as it lies.
int64_t channels_last_channels(const Tensor& x, int nd) {
  return nd == 2 && x.dim() == 4 && x.suggest_memory_format() == MemoryFormat::ChannelsLast ? x.size(1) : 0;
}

struct WindowArgs {
  int nd;  // 2 or 3
  const char* op;
  Size3 kernel, stride, padding, dilation;  // (D, H, W); 2-D callers give D = (1, 1, 0, 1)
  bool ceil_mode = false;
  bool count_include_pad = true;
  std::optional<int64_t> divisor_override;
};

PoolGeometry window_geometry(const Tensor& x, WindowArgs a) {
  const int nd = a.nd, first = 3 - nd;
  const bool is_avg = std::string(a.op).rfind("avg", 0) == 0;
  if (is_avg) MINIDL_CHECK(!a.divisor_override || *a.divisor_override != 0, a.op, ": divisor must be not zero");
  check_input(x, nd, a.op);
  if (a.stride == Size3{first ? 1 : 0, 0, 0}) a.stride = a.kernel;  // PyTorch's stride=None
  auto all_positive = [&](const Size3& v) { return std::all_of(v.begin() + first, v.end(), [](int64_t e) { return e > 0; }); };
  const bool two = nd == 2;
  MINIDL_CHECK(all_positive(a.kernel), a.op, ": kernel size should be greater than zero, but got ",
               two ? "kH: " : "kT: ", two ? a.kernel[1] : a.kernel[0], two ? " kW: " : " kH: ",
               two ? a.kernel[2] : a.kernel[1], two ? "" : " kW: " + std::to_string(a.kernel[2]));
  MINIDL_CHECK(all_positive(a.stride), a.op, ": stride should be greater than zero, but got ",
               two ? "dH: " : "dT: ", two ? a.stride[1] : a.stride[0], two ? " dW: " : " dH: ",
               two ? a.stride[2] : a.stride[1], two ? "" : " dW: " + std::to_string(a.stride[2]));
  MINIDL_CHECK(all_positive(a.dilation), a.op, ": dilation should be greater than zero, but got ",
               two ? "dilationH: " : "dilationT: ", two ? a.dilation[1] : a.dilation[0],
               two ? " dilationW: " : " dilationH: ", two ? a.dilation[2] : a.dilation[1],
               two ? "" : " dilationW: " + std::to_string(a.dilation[2]));
  for (int i = first; i < 3; ++i) {
    MINIDL_CHECK(a.padding[i] >= 0, a.op, ": pad must be non-negative, but got pad: ", a.padding[i]);
    MINIDL_CHECK(a.padding[i] <= ((a.kernel[i] - 1) * a.dilation[i] + 1) / 2, a.op,
                 ": pad should be at most half of effective kernel size, but got pad=", a.padding[i],
                 ", kernel_size=", a.kernel[i], " and dilation=", a.dilation[i]);
  }
  bool pad_ok = true;  // PyTorch's shape check also bounds the padding by the plain kernel
  for (int i = first; i < 3; ++i) pad_ok = pad_ok && a.padding[i] <= a.kernel[i] / 2;
  if (two)
    MINIDL_CHECK(pad_ok, a.op, ": pad should be smaller than or equal to half of kernel size, but got padW = ",
                 a.padding[2], ", padH = ", a.padding[1], ", kW = ", a.kernel[2], ", kH = ", a.kernel[1]);
  else
    MINIDL_CHECK(pad_ok, a.op, ": pad should be smaller than or equal to half of kernel size, but got kT: ",
                 a.kernel[0], " kW: ", a.kernel[2], " kH: ", a.kernel[1], " padT: ", a.padding[0],
                 " padW: ", a.padding[2], " padH: ", a.padding[1]);

  PoolGeometry g;
  for (int i = first; i < 3; ++i) g.in[i] = x.size(x.dim() - 3 + i);
  if (is_avg && !two)  // avg_pool3d's own check, before the output size
    MINIDL_CHECK(g.in[0] >= a.kernel[0] && g.in[1] >= a.kernel[1] && g.in[2] >= a.kernel[2], a.op,
                 ": input image (T: ", g.in[0], " H: ", g.in[1], " W: ", g.in[2], ") smaller than kernel size (kT: ",
                 a.kernel[0], " kH: ", a.kernel[1], " kW: ", a.kernel[2], ")");
  g.planes = x.numel() / g.in_plane();
  g.kernel = a.kernel;
  g.stride = a.stride;
  g.padding = a.padding;
  g.dilation = a.dilation;
  for (int i = first; i < 3; ++i)
    g.out[i] = pooled_size(g.in[i], a.kernel[i], a.padding[i], a.stride[i], a.dilation[i], a.ceil_mode);
  const int64_t C = x.size(-nd - 1);
  MINIDL_CHECK(std::all_of(g.out.begin() + first, g.out.end(), [](int64_t o) { return o >= 1; }), a.op,
               ": Given input size: (", C, "x", join(g.in, nd, "x"), "). Calculated output size: (", C, "x",
               join(g.out, nd, "x"), "). Output size is too small");
  g.count_include_pad = a.count_include_pad;
  g.divisor_override = a.divisor_override.value_or(0);
  g.channels_last = channels_last_channels(x, nd);
  return g;
}

PoolGeometry adaptive_geometry(const Tensor& x, const Size3& output_size, int nd, const char* op) {
  const int first = 3 - nd;
  MINIDL_CHECK(x.defined(), op, "(): expected a defined input tensor");
  MINIDL_CHECK(x.dim() == nd + 1 || x.dim() == nd + 2, op, "(): Expected ", nd + 1, "D or ", nd + 2,
               "D tensor, but got: ", shape_str(x.shape()));
  for (int64_t d = x.dim() - nd - 1; d < x.dim(); ++d)
    MINIDL_CHECK(x.size(d) > 0, op,
                 "(): Expected input to have non-zero size for non-batch dimensions, but input has sizes ",
                 shape_str(x.shape()), " with dimension ", d, " being empty");
  MINIDL_CHECK(std::all_of(output_size.begin() + first, output_size.end(), [](int64_t o) { return o >= 0; }), op,
               ": elements of output_size must be greater than or equal to 0 but received {",
               join(output_size, nd, ", "), "}");
  MINIDL_CHECK(is_floating(x.dtype()), op, ": expected a floating point input, got ", dtype_name(x.dtype()));
  PoolGeometry g;
  for (int i = first; i < 3; ++i) {
    g.in[i] = x.size(x.dim() - 3 + i);
    g.out[i] = output_size[i];
  }
  g.planes = x.numel() / g.in_plane();
  g.adaptive = true;
  g.channels_last = channels_last_channels(x, nd);
  return g;
}

Size3 as3(Size2 a, int64_t depth) { return {depth, a[0], a[1]}; }

std::tuple<Tensor, Tensor> max_pool(const Tensor& x, const PoolGeometry& g, int nd) {
  variable_list out = MaxPoolFunction::apply(x, g, static_cast<int64_t>(nd));
  return {out[0], out[1]};
}

}  // namespace

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Size2 kernel_size, Size2 stride, Size2 padding,
                                                   Size2 dilation, bool ceil_mode) {
  const WindowArgs a{2, "max_pool2d", as3(kernel_size, 1), as3(stride, 1), as3(padding, 0), as3(dilation, 1),
                     ceil_mode, true, std::nullopt};
  return max_pool(x, window_geometry(x, a), 2);
}

Tensor max_pool2d(const Tensor& x, Size2 kernel_size, Size2 stride, Size2 padding, Size2 dilation, bool ceil_mode) {
  return std::get<0>(max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode));
}

Tensor avg_pool2d(const Tensor& x, Size2 kernel_size, Size2 stride, Size2 padding, bool ceil_mode,
                  bool count_include_pad, std::optional<int64_t> divisor_override) {
  const WindowArgs a{2,         "avg_pool2d",      as3(kernel_size, 1), as3(stride, 1), as3(padding, 0), {1, 1, 1},
                     ceil_mode, count_include_pad, divisor_override};
  return AvgPoolFunction::apply(x, window_geometry(x, a), int64_t{2});
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size) {
  return AvgPoolFunction::apply(x, adaptive_geometry(x, as3(output_size, 1), 2, "adaptive_avg_pool2d"), int64_t{2});
}

std::tuple<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x, Size2 output_size) {
  return max_pool(x, adaptive_geometry(x, as3(output_size, 1), 2, "adaptive_max_pool2d"), 2);
}

Tensor adaptive_max_pool2d(const Tensor& x, Size2 output_size) {
  return std::get<0>(adaptive_max_pool2d_with_indices(x, output_size));
}

std::tuple<Tensor, Tensor> max_pool3d_with_indices(const Tensor& x, Size3 kernel_size, Size3 stride, Size3 padding,
                                                   Size3 dilation, bool ceil_mode) {
  const WindowArgs a{3, "max_pool3d", kernel_size, stride, padding, dilation, ceil_mode, true, std::nullopt};
  return max_pool(x, window_geometry(x, a), 3);
}

Tensor max_pool3d(const Tensor& x, Size3 kernel_size, Size3 stride, Size3 padding, Size3 dilation, bool ceil_mode) {
  const Tensor x32 = amp::cast_args(amp::AmpOp::max_pool3d, x)[0];  // float32 under CPU autocast
  return std::get<0>(max_pool3d_with_indices(x32, kernel_size, stride, padding, dilation, ceil_mode));
}

Tensor avg_pool3d(const Tensor& x, Size3 kernel_size, Size3 stride, Size3 padding, bool ceil_mode,
                  bool count_include_pad, std::optional<int64_t> divisor_override) {
  const WindowArgs a{3,         "avg_pool3d",      kernel_size, stride, padding, {1, 1, 1},
                     ceil_mode, count_include_pad, divisor_override};
  const Tensor x32 = amp::cast_args(amp::AmpOp::avg_pool3d, x)[0];
  return AvgPoolFunction::apply(x32, window_geometry(x32, a), int64_t{3});
}

Tensor adaptive_avg_pool3d(const Tensor& x, Size3 output_size) {
  const Tensor x32 = amp::cast_args(amp::AmpOp::adaptive_avg_pool3d, x)[0];
  return AvgPoolFunction::apply(x32, adaptive_geometry(x32, output_size, 3, "adaptive_avg_pool3d"), int64_t{3});
}

std::tuple<Tensor, Tensor> adaptive_max_pool3d_with_indices(const Tensor& x, Size3 output_size) {
  const Tensor x32 = amp::cast_args(amp::AmpOp::adaptive_max_pool3d, x)[0];  // also with indices, as PyTorch
  return max_pool(x32, adaptive_geometry(x32, output_size, 3, "adaptive_max_pool3d"), 3);
}

Tensor adaptive_max_pool3d(const Tensor& x, Size3 output_size) {
  return std::get<0>(adaptive_max_pool3d_with_indices(x, output_size));
}

}  // namespace minidl
