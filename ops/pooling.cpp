// 2-D pooling over NCHW (or unbatched CHW) input; each of the N*C planes is
// independent (OpenMP over planes). No dilation, no ceil_mode.
//   max_pool2d:  y[oh,ow] = max over the window at (oh*s - pad, ow*s - pad) of size k;
//                padding acts as -inf. Forward saves the argmax (flat h*W+w index in
//                the plane, first max on ties, NaN wins). Backward: dx[argmax] += dy.
//   avg_pool2d:  y = sum(window) / divisor, divisor = window size clipped to the padded
//                input (count_include_pad) or to the input. Backward spreads dy / divisor
//                over the window. Saves nothing but sizes.
//   adaptive_*:  output bin i covers [floor(i*H/OH), ceil((i+1)*H/OH)) (PyTorch's bins);
//                avg divides by the bin area, max saves the argmax like max_pool2d.
// Backward returns a fresh gradient tensor (the engine accumulates it).
// CPU kernels: ops/cpu/pooling.cpp.
#include "minidl/ops/pooling.h"

#include <algorithm>

#include "minidl/core/autograd/function.h"

namespace minidl {

DispatchStub<MaxPoolForwardFn> max_pool2d_forward_stub("max_pool2d");
DispatchStub<MaxPoolBackwardFn> max_pool2d_backward_stub("max_pool2d_backward");
DispatchStub<AvgPoolForwardFn> avg_pool2d_forward_stub("avg_pool2d");
DispatchStub<AvgPoolBackwardFn> avg_pool2d_backward_stub("avg_pool2d_backward");

namespace {

// ---- autograd ------------------------------------------------------------------

Shape output_shape(const Tensor& x, const Pool2dGeometry& g) {
  return x.dim() == 4 ? Shape{x.size(0), x.size(1), g.OH, g.OW} : Shape{x.size(0), g.OH, g.OW};
}

// The kernels overwrite every element of dx, except when the output is empty.
Tensor input_grad_buffer(AutogradContext* ctx, const Tensor& gy) {
  const Shape shape = ctx->saved_data["input_shape"].to_int_list();
  const TensorOptions options = gy.options();
  return gy.numel() > 0 ? empty(shape, options) : zeros(shape, options);
}

struct MaxPool2dFunction : autograd::Function<MaxPool2dFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Pool2dGeometry& g, bool adaptive) {
    Tensor y = empty(output_shape(x, g), x.options());
    Tensor indices = empty(y.shape(), x.options().dtype(kInt64));
    if (y.numel() > 0) max_pool2d_forward_stub(x.device())(x.contiguous(), y, indices, g, adaptive);
    ctx->save_for_backward({indices});
    ctx->saved_data["geometry"] = g.to_list();
    ctx->saved_data["input_shape"] = x.shape();
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor indices = ctx->get_saved_variables()[0];
    const auto g = Pool2dGeometry::from_list(ctx->saved_data["geometry"].to_int_list());
    const Tensor gy = grads[0].contiguous();
    Tensor gx = input_grad_buffer(ctx, gy);
    if (gy.numel() > 0) max_pool2d_backward_stub(gy.device())(gy, indices, gx, g);
    return {gx, Tensor(), Tensor()};
  }
};

struct AvgPool2dFunction : autograd::Function<AvgPool2dFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Pool2dGeometry& g, bool adaptive,
                        bool count_include_pad) {
    Tensor y = empty(output_shape(x, g), x.options());
    if (y.numel() > 0) avg_pool2d_forward_stub(x.device())(x.contiguous(), y, g, adaptive, count_include_pad);
    ctx->saved_data["geometry"] = g.to_list();
    ctx->saved_data["input_shape"] = x.shape();
    ctx->saved_data["adaptive"] = adaptive;
    ctx->saved_data["count_include_pad"] = count_include_pad;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto g = Pool2dGeometry::from_list(ctx->saved_data["geometry"].to_int_list());
    const Tensor gy = grads[0].contiguous();
    Tensor gx = input_grad_buffer(ctx, gy);
    if (gy.numel() > 0)
      avg_pool2d_backward_stub(gy.device())(gy, gx, g, ctx->saved_data["adaptive"].to_bool(),
                                            ctx->saved_data["count_include_pad"].to_bool());
    return {gx, Tensor(), Tensor(), Tensor()};
  }
};

// ---- argument checks -----------------------------------------------------------------

// floor(a / b) for b > 0, as PyTorch's pooling_output_shape (a may be negative).
int64_t div_floor(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

void check_input(const Tensor& x, const char* op) {
  MINIDL_CHECK(x.defined(), op, ": expected a defined input tensor");
  const bool ok_dims = x.dim() == 3 || x.dim() == 4;
  bool non_empty = ok_dims;
  for (int64_t d = x.dim() - 3; ok_dims && d < x.dim(); ++d) non_empty = non_empty && x.size(d) > 0;
  MINIDL_CHECK(ok_dims && non_empty, op,
               ": Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, but got:",
               shape_str(x.shape()));
  MINIDL_CHECK(is_floating(x.dtype()), op, ": expected a floating point input, got ", dtype_name(x.dtype()));
}

Pool2dGeometry window_geometry(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                               std::array<int64_t, 2> padding, const char* op) {
  check_input(x, op);
  if (stride[0] == 0 && stride[1] == 0) stride = kernel;  // PyTorch's stride=None
  MINIDL_CHECK(kernel[0] > 0 && kernel[1] > 0, op, ": kernel size should be greater than zero, but got kH: ", kernel[0],
               " kW: ", kernel[1]);
  MINIDL_CHECK(stride[0] > 0 && stride[1] > 0, op, ": stride should be greater than zero, but got dH: ", stride[0],
               " dW: ", stride[1]);
  for (int i = 0; i < 2; ++i) {
    MINIDL_CHECK(padding[i] >= 0, op, ": pad must be non-negative, but got pad: ", padding[i]);
    MINIDL_CHECK(padding[i] <= kernel[i] / 2, op,
                 ": pad should be at most half of effective kernel size, but got pad=", padding[i],
                 ", kernel_size=", kernel[i], " and dilation=1");
  }
  Pool2dGeometry g;
  g.H = x.size(-2);
  g.W = x.size(-1);
  g.planes = x.numel() / (g.H * g.W);
  g.kH = kernel[0];
  g.kW = kernel[1];
  g.sH = stride[0];
  g.sW = stride[1];
  g.pH = padding[0];
  g.pW = padding[1];
  g.OH = div_floor(g.H + 2 * g.pH - g.kH, g.sH) + 1;
  g.OW = div_floor(g.W + 2 * g.pW - g.kW, g.sW) + 1;
  const int64_t C = x.size(-3);
  MINIDL_CHECK(g.OH >= 1 && g.OW >= 1, op, ": Given input size: (", C, "x", g.H, "x", g.W,
               "). Calculated output size: (", C, "x", std::max<int64_t>(g.OH, 0), "x", std::max<int64_t>(g.OW, 0),
               "). Output size is too small");
  return g;
}

Pool2dGeometry adaptive_geometry(const Tensor& x, std::array<int64_t, 2> output_size, const char* op) {
  MINIDL_CHECK(x.defined(), op, "(): expected a defined input tensor");
  MINIDL_CHECK(x.dim() == 3 || x.dim() == 4, op, "(): Expected 3D or 4D tensor, but got: ", shape_str(x.shape()));
  for (int64_t d = x.dim() - 3; d < x.dim(); ++d)
    MINIDL_CHECK(x.size(d) > 0, op,
                 "(): Expected input to have non-zero size for non-batch dimensions, but input has sizes ",
                 shape_str(x.shape()), " with dimension ", d, " being empty");
  MINIDL_CHECK(output_size[0] >= 0 && output_size[1] >= 0, op,
               ": elements of output_size must be greater than or equal to 0 but received {", output_size[0], ", ",
               output_size[1], "}");
  MINIDL_CHECK(is_floating(x.dtype()), op, ": expected a floating point input, got ", dtype_name(x.dtype()));
  Pool2dGeometry g;
  g.H = x.size(-2);
  g.W = x.size(-1);
  g.planes = x.numel() / (g.H * g.W);
  g.OH = output_size[0];
  g.OW = output_size[1];
  return g;
}

}  // namespace


Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding) {
  const Pool2dGeometry g = window_geometry(x, kernel_size, stride, padding, "max_pool2d");
  return MaxPool2dFunction::apply(x, g, /*adaptive=*/false);
}

Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding, bool count_include_pad) {
  const Pool2dGeometry g = window_geometry(x, kernel_size, stride, padding, "avg_pool2d");
  return AvgPool2dFunction::apply(x, g, /*adaptive=*/false, count_include_pad);
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  const Pool2dGeometry g = adaptive_geometry(x, output_size, "adaptive_avg_pool2d");
  return AvgPool2dFunction::apply(x, g, /*adaptive=*/true, /*count_include_pad=*/true);
}

Tensor adaptive_max_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  const Pool2dGeometry g = adaptive_geometry(x, output_size, "adaptive_max_pool2d");
  return MaxPool2dFunction::apply(x, g, /*adaptive=*/true);
}

}  // namespace minidl
