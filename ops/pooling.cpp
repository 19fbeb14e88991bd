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
#include "ops/pooling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/autograd/function.h"
#include "core/dispatch.h"

namespace minidl {

namespace {

struct Pool2dGeometry {
  int64_t planes = 0, H = 0, W = 0, OH = 0, OW = 0;
  int64_t kH = 1, kW = 1, sH = 1, sW = 1, pH = 0, pW = 0;  // unused by the adaptive pools

  std::vector<int64_t> to_list() const { return {planes, H, W, OH, OW, kH, kW, sH, sW, pH, pW}; }
  static Pool2dGeometry from_list(const std::vector<int64_t>& v) {
    return {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]};
  }
  // Rough work estimate, to parallelize only when it pays.
  int64_t work(int64_t per_output) const { return planes * OH * OW * per_output; }
};

constexpr int64_t kParallelWork = 32768;

// PyTorch's adaptive bins.
inline int64_t bin_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
inline int64_t bin_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

// ---- kernels -------------------------------------------------------------------

// Max over rows [h0, h1) x cols [w0, w1) of one plane; NaN propagates as in PyTorch.
template <class T>
inline void window_max(const T* xp, int64_t W, int64_t h0, int64_t h1, int64_t w0, int64_t w1, T* out, int64_t* index) {
  T best = -std::numeric_limits<T>::infinity();
  int64_t best_i = h0 * W + w0;
  for (int64_t h = h0; h < h1; ++h)
    for (int64_t w = w0; w < w1; ++w) {
      const T v = xp[h * W + w];
      if (v > best || std::isnan(v)) {
        best = v;
        best_i = h * W + w;
      }
    }
  *out = best;
  *index = best_i;
}

template <class T>
void max_pool2d_forward_kernel(const T* x, T* y, int64_t* idx, const Pool2dGeometry g) {
#pragma omp parallel for schedule(static) if (g.work(g.kH * g.kW) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * g.H * g.W;
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const int64_t hs = oh * g.sH - g.pH;
      const int64_t h0 = std::max<int64_t>(hs, 0), h1 = std::min(hs + g.kH, g.H);
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const int64_t ws = ow * g.sW - g.pW;
        const int64_t w0 = std::max<int64_t>(ws, 0), w1 = std::min(ws + g.kW, g.W);
        const int64_t o = (p * g.OH + oh) * g.OW + ow;
        window_max(xp, g.W, h0, h1, w0, w1, y + o, idx + o);
      }
    }
  }
}

template <class T>
void adaptive_max_pool2d_forward_kernel(const T* x, T* y, int64_t* idx, const Pool2dGeometry g) {
  const int64_t bin =
      ((g.H + g.OH - 1) / std::max<int64_t>(g.OH, 1) + 1) * ((g.W + g.OW - 1) / std::max<int64_t>(g.OW, 1) + 1);
#pragma omp parallel for schedule(static) if (g.work(bin) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * g.H * g.W;
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const int64_t h0 = bin_start(oh, g.H, g.OH), h1 = bin_end(oh, g.H, g.OH);
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const int64_t w0 = bin_start(ow, g.W, g.OW), w1 = bin_end(ow, g.W, g.OW);
        const int64_t o = (p * g.OH + oh) * g.OW + ow;
        window_max(xp, g.W, h0, h1, w0, w1, y + o, idx + o);
      }
    }
  }
}

// Shared by max_pool2d and adaptive_max_pool2d: routes each dy to its argmax.
template <class T>
void max_pool2d_backward_kernel(const T* gy, const int64_t* idx, T* gx, const Pool2dGeometry g) {
  const int64_t in_plane = g.H * g.W, out_plane = g.OH * g.OW;
#pragma omp parallel for schedule(static) if (g.planes * (in_plane + out_plane) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    T* gxp = gx + p * in_plane;
    std::fill(gxp, gxp + in_plane, T(0));
    for (int64_t o = p * out_plane; o < (p + 1) * out_plane; ++o) gxp[idx[o]] += gy[o];
  }
}

// The averaging window of output (oh, ow), clipped to the input, and its divisor.
struct AvgWindow {
  int64_t h0, h1, w0, w1;
  double divisor;
};

inline AvgWindow avg_window(const Pool2dGeometry& g, bool adaptive, bool count_include_pad, int64_t oh, int64_t ow) {
  if (adaptive) {
    AvgWindow win{bin_start(oh, g.H, g.OH), bin_end(oh, g.H, g.OH), bin_start(ow, g.W, g.OW), bin_end(ow, g.W, g.OW),
                  0.0};
    win.divisor = static_cast<double>((win.h1 - win.h0) * (win.w1 - win.w0));
    return win;
  }
  int64_t h0 = oh * g.sH - g.pH, w0 = ow * g.sW - g.pW;
  int64_t h1 = std::min(h0 + g.kH, g.H + g.pH), w1 = std::min(w0 + g.kW, g.W + g.pW);
  const int64_t padded_area = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, g.H);
  w1 = std::min(w1, g.W);
  const int64_t area = count_include_pad ? padded_area : (h1 - h0) * (w1 - w0);
  return {h0, h1, w0, w1, static_cast<double>(area)};
}

template <class T>
void avg_pool2d_forward_kernel(const T* x, T* y, const Pool2dGeometry g, bool adaptive, bool count_include_pad) {
  if (adaptive && g.OH == 1 && g.OW == 1) {  // global average pooling: one mean per plane
    const int64_t n = g.H * g.W;
#pragma omp parallel for schedule(static) if (g.planes * n >= kParallelWork)
    for (int64_t p = 0; p < g.planes; ++p) {
      const T* xp = x + p * n;
      double s = 0.0;
      for (int64_t i = 0; i < n; ++i) s += xp[i];
      y[p] = static_cast<T>(s / static_cast<double>(n));
    }
    return;
  }
  const int64_t per_output =
      adaptive ? (g.H / std::max<int64_t>(g.OH, 1) + 1) * (g.W / std::max<int64_t>(g.OW, 1) + 1) : g.kH * g.kW;
#pragma omp parallel for schedule(static) if (g.work(per_output) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * g.H * g.W;
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const AvgWindow win = avg_window(g, adaptive, count_include_pad, oh, ow);
        double s = 0.0;
        for (int64_t h = win.h0; h < win.h1; ++h)
          for (int64_t w = win.w0; w < win.w1; ++w) s += xp[h * g.W + w];
        y[(p * g.OH + oh) * g.OW + ow] = static_cast<T>(s / win.divisor);
      }
  }
}

template <class T>
void avg_pool2d_backward_kernel(const T* gy, T* gx, const Pool2dGeometry g, bool adaptive, bool count_include_pad) {
  const int64_t in_plane = g.H * g.W, out_plane = g.OH * g.OW;
  if (adaptive && g.OH == 1 && g.OW == 1) {
#pragma omp parallel for schedule(static) if (g.planes * in_plane >= kParallelWork)
    for (int64_t p = 0; p < g.planes; ++p)
      std::fill(gx + p * in_plane, gx + (p + 1) * in_plane, static_cast<T>(gy[p] / static_cast<double>(in_plane)));
    return;
  }
#pragma omp parallel for schedule(static) if (g.planes * (in_plane + out_plane * g.kH * g.kW) >= kParallelWork)
  for (int64_t p = 0; p < g.planes; ++p) {
    T* gxp = gx + p * in_plane;
    std::fill(gxp, gxp + in_plane, T(0));
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const AvgWindow win = avg_window(g, adaptive, count_include_pad, oh, ow);
        const T share = static_cast<T>(gy[(p * g.OH + oh) * g.OW + ow] / win.divisor);
        for (int64_t h = win.h0; h < win.h1; ++h)
          for (int64_t w = win.w0; w < win.w1; ++w) gxp[h * g.W + w] += share;
      }
  }
}

// ---- dispatch ------------------------------------------------------------------

using MaxPoolForwardFn = void(const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dGeometry& g,
                              bool adaptive);
using MaxPoolBackwardFn = void(const Tensor& grad_y, const Tensor& indices, const Tensor& grad_x,
                               const Pool2dGeometry& g);
using AvgPoolForwardFn = void(const Tensor& x, const Tensor& y, const Pool2dGeometry& g, bool adaptive,
                              bool count_include_pad);
using AvgPoolBackwardFn = void(const Tensor& grad_y, const Tensor& grad_x, const Pool2dGeometry& g, bool adaptive,
                               bool count_include_pad);

DispatchStub<MaxPoolForwardFn> max_pool2d_forward_stub("max_pool2d");
DispatchStub<MaxPoolBackwardFn> max_pool2d_backward_stub("max_pool2d_backward");
DispatchStub<AvgPoolForwardFn> avg_pool2d_forward_stub("avg_pool2d");
DispatchStub<AvgPoolBackwardFn> avg_pool2d_backward_stub("avg_pool2d_backward");

void max_pool2d_forward_cpu(const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dGeometry& g,
                            bool adaptive) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), adaptive ? "adaptive_max_pool2d" : "max_pool2d", [&] {
    if (adaptive)
      adaptive_max_pool2d_forward_kernel(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), indices.data_ptr<int64_t>(),
                                         g);
    else
      max_pool2d_forward_kernel(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), indices.data_ptr<int64_t>(), g);
  });
}

void max_pool2d_backward_cpu(const Tensor& grad_y, const Tensor& indices, const Tensor& grad_x,
                             const Pool2dGeometry& g) {
  MINIDL_DISPATCH_FLOATING(grad_x.dtype(), "max_pool2d_backward", [&] {
    max_pool2d_backward_kernel(grad_y.data_ptr<scalar_t>(), indices.data_ptr<int64_t>(), grad_x.data_ptr<scalar_t>(),
                               g);
  });
}

void avg_pool2d_forward_cpu(const Tensor& x, const Tensor& y, const Pool2dGeometry& g, bool adaptive,
                            bool count_include_pad) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), adaptive ? "adaptive_avg_pool2d" : "avg_pool2d", [&] {
    avg_pool2d_forward_kernel(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), g, adaptive, count_include_pad);
  });
}

void avg_pool2d_backward_cpu(const Tensor& grad_y, const Tensor& grad_x, const Pool2dGeometry& g, bool adaptive,
                             bool count_include_pad) {
  MINIDL_DISPATCH_FLOATING(grad_x.dtype(), "avg_pool2d_backward", [&] {
    avg_pool2d_backward_kernel(grad_y.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(), g, adaptive,
                               count_include_pad);
  });
}

// ---- autograd ------------------------------------------------------------------

Shape output_shape(const Tensor& x, const Pool2dGeometry& g) {
  return x.dim() == 4 ? Shape{x.size(0), x.size(1), g.OH, g.OW} : Shape{x.size(0), g.OH, g.OW};
}

// The kernels overwrite every element of dx, except when the output is empty.
Tensor input_grad_buffer(AutogradContext* ctx, const Tensor& gy) {
  const Shape shape = ctx->saved_data["input_shape"].to_int_list();
  const TensorOptions options = TensorOptions(gy.dtype()).device(gy.device());
  return gy.numel() > 0 ? empty(shape, options) : zeros(shape, options);
}

struct MaxPool2dFunction : autograd::Function<MaxPool2dFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Pool2dGeometry& g, bool adaptive) {
    Tensor y = empty(output_shape(x, g), TensorOptions(x.dtype()).device(x.device()));
    Tensor indices = empty(y.shape(), TensorOptions(kInt64).device(x.device()));
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
    Tensor y = empty(output_shape(x, g), TensorOptions(x.dtype()).device(x.device()));
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

void register_pooling_cpu_kernels() {
  max_pool2d_forward_stub.set(DeviceType::CPU, max_pool2d_forward_cpu);
  max_pool2d_backward_stub.set(DeviceType::CPU, max_pool2d_backward_cpu);
  avg_pool2d_forward_stub.set(DeviceType::CPU, avg_pool2d_forward_cpu);
  avg_pool2d_backward_stub.set(DeviceType::CPU, avg_pool2d_backward_cpu);
}

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
