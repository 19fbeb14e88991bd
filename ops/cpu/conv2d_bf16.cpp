// conv2d on bfloat16 operands through bf16_gemm (ops/cpu/bf16_kernels.h):
// im2col, then a GEMM per image and group. With CK = C/groups * kH * kW,
// P = out_h * out_w, W_g the group's weights as a Kg x CK matrix (their
// memory order) and cols the CK x P im2col matrix of one image's group:
//   forward      Y = W_g cols + bias               (float32 sums, rounded once)
//   grad input   dcols = W_g^T dY (float32), added back to dx's pixels
//                (col2im) in float32, rounded once
//   grad weight  dW_g += dY cols^T, summed over the images in float32,
//                rounded once; dbias the float32 sum of dy
// A 1x1 kernel with stride 1 and no padding needs no im2col: cols is the image.
// Threads: each takes whole images, its GEMMs single-threaded (with one image,
// the GEMM splits itself); grad weight sums per thread, then adds the threads up.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "minidl/ops/cpu/bf16_gemm.h"
#include "minidl/ops/cpu/bf16_kernels.h"
#include "minidl/ops/cpu/conv2d_gemm.h"
#include "minidl/ops/cpu/conv2d_kernels.h"

namespace minidl::cpu {

namespace {

using conv2d_gemm::Slot;
using conv2d_gemm::thread_buffer;

struct Dims {
  int64_t G, Cg, Kg, CK, P, HW;
  explicit Dims(const Conv2dGeometry& g)
      : G(g.groups), Cg(g.in_channels / g.groups), Kg(g.out_channels / g.groups),
        CK(Cg * g.kernel_h * g.kernel_w), P(g.out_h * g.out_w), HW(g.in_h * g.in_w) {}
};

bool no_im2col(const Conv2dGeometry& g) {
  return g.kernel_h == 1 && g.kernel_w == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
}

// The output columns ow in [lo, hi) that kernel column b reads inside the row.
void valid_columns(const Conv2dGeometry& g, int64_t b, int64_t& lo, int64_t& hi) {
  const int64_t off = b * g.dilation_w - g.pad_w;  // iw = ow * stride + off
  lo = off >= 0 ? 0 : std::min(g.out_w, (-off + g.stride_w - 1) / g.stride_w);
  hi = g.in_w - off <= 0 ? 0 : std::clamp<int64_t>((g.in_w - off + g.stride_w - 1) / g.stride_w, lo, g.out_w);
}

// Calls f(row, oh, ih, b, lo, hi) for each (row of cols, output row): row =
// (c * kH + a) * kW + b; ih < 0 or >= in_h when the output row reads padding.
template <class F>
void for_each_cols_row(const Conv2dGeometry& g, int64_t Cg, F f) {
  for (int64_t c = 0; c < Cg; ++c)
    for (int64_t a = 0; a < g.kernel_h; ++a)
      for (int64_t b = 0; b < g.kernel_w; ++b) {
        int64_t lo, hi;
        valid_columns(g, b, lo, hi);
        const int64_t row = (c * g.kernel_h + a) * g.kernel_w + b;
        for (int64_t oh = 0; oh < g.out_h; ++oh) f(c, row, oh, oh * g.stride_h - g.pad_h + a * g.dilation_h, b, lo, hi);
      }
}

// cols (CK x P) of one image's group x (Cg planes).
void im2col(const Conv2dGeometry& g, const Dims& d, const BFloat16* x, BFloat16* cols) {
  const BFloat16 zero = BFloat16::from_bits(0);
  for_each_cols_row(g, d.Cg, [&](int64_t c, int64_t row, int64_t oh, int64_t ih, int64_t b, int64_t lo, int64_t hi) {
    BFloat16* dst = cols + row * d.P + oh * g.out_w;
    if (ih < 0 || ih >= g.in_h || lo >= hi) return std::fill(dst, dst + g.out_w, zero);
    const BFloat16* src = x + c * d.HW + ih * g.in_w + b * g.dilation_w - g.pad_w;
    std::fill(dst, dst + lo, zero);
    if (g.stride_w == 1) std::memcpy(dst + lo, src + lo, static_cast<size_t>(hi - lo) * sizeof(BFloat16));
    else for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = src[ow * g.stride_w];
    std::fill(dst + hi, dst + g.out_w, zero);
  });
}

// dx (Cg planes, float32) += dcols (CK x P) put back where im2col took it.
void col2im(const Conv2dGeometry& g, const Dims& d, const float* dcols, float* dx) {
  for_each_cols_row(g, d.Cg, [&](int64_t c, int64_t row, int64_t oh, int64_t ih, int64_t b, int64_t lo, int64_t hi) {
    if (ih < 0 || ih >= g.in_h) return;
    const float* src = dcols + row * d.P + oh * g.out_w;
    float* dst = dx + c * d.HW + ih * g.in_w + b * g.dilation_w - g.pad_w;
    for (int64_t ow = lo; ow < hi; ++ow) dst[ow * g.stride_w] += src[ow];
  });
}

// Threads over the images: f(n) for each image, with nested GEMMs
// single-threaded, unless there is one image (then the GEMMs split).
template <class F>
void for_each_image(const Conv2dGeometry& g, F f) {
  const int threads = conv2d_threads(g);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && g.batch > 1)
  for (int64_t n = 0; n < g.batch; ++n) f(n);
}

const BFloat16* ptr(const Tensor& t) { return t.defined() ? t.data_ptr<BFloat16>() : nullptr; }

}  // namespace

void conv2d_forward_bf16(const Conv2dGeometry& g, const Tensor& x_t, const Tensor& w_t, const Tensor& bias_t,
                         const Tensor& y_t) {
  const Dims d(g);
  const BFloat16 *x = ptr(x_t), *w = ptr(w_t), *bias = ptr(bias_t);
  BFloat16* y = y_t.data_ptr<BFloat16>();
  for_each_image(g, [&](int64_t n) {
    for (int64_t gi = 0; gi < d.G; ++gi) {
      const BFloat16* xg = x + (n * g.in_channels + gi * d.Cg) * d.HW;
      const BFloat16* cols = xg;
      if (!no_im2col(g)) {
        BFloat16* buf = thread_buffer<BFloat16>(Slot::kOperandB, d.CK * d.P);
        im2col(g, d, xg, buf);
        cols = buf;
      }
      Bf16GemmOut out;
      out.bf16 = y + (n * g.out_channels + gi * d.Kg) * d.P, out.ldc = d.P;
      out.row_bias = bias ? bias + gi * d.Kg : nullptr;
      bf16_gemm(false, false, d.Kg, d.P, d.CK, w + gi * d.Kg * d.CK, d.CK, cols, d.P, out);
    }
  });
}

void conv2d_backward_bf16(const Conv2dGeometry& g, const Tensor& x_t, const Tensor& w_t, const Tensor& dy_t,
                          const Tensor& dx_t, const Tensor& dw_t, const Tensor& dbias_t) {
  const Dims d(g);
  const BFloat16 *x = ptr(x_t), *w = ptr(w_t), *dy = ptr(dy_t);
  if (dx_t.defined()) {
    BFloat16* dx = dx_t.data_ptr<BFloat16>();
    for_each_image(g, [&](int64_t n) {
      for (int64_t gi = 0; gi < d.G; ++gi) {
        const BFloat16* dyg = dy + (n * g.out_channels + gi * d.Kg) * d.P;
        const BFloat16* wg = w + gi * d.Kg * d.CK;
        BFloat16* dxg = dx + (n * g.in_channels + gi * d.Cg) * d.HW;
        Bf16GemmOut out;
        if (no_im2col(g)) {  // dx = W_g^T dY directly
          out.bf16 = dxg, out.ldc = d.HW;
          bf16_gemm(true, false, d.CK, d.P, d.Kg, wg, d.CK, dyg, d.P, out);
          continue;
        }
        float* dcols = thread_buffer<float>(Slot::kProduct, d.CK * d.P);
        float* plane = thread_buffer<float>(Slot::kRows, d.Cg * d.HW);
        out.f32 = dcols, out.ldc = d.P;
        bf16_gemm(true, false, d.CK, d.P, d.Kg, wg, d.CK, dyg, d.P, out);
        std::fill_n(plane, d.Cg * d.HW, 0.0f);
        col2im(g, d, dcols, plane);
        for (int64_t i = 0; i < d.Cg * d.HW; ++i) dxg[i] = BFloat16(plane[i]);
      }
    });
  }
  if (dw_t.defined()) {
    // Per thread: float32 sums of dW (all groups), added up after.
    const int threads = g.batch > 1 ? conv2d_threads(g) : 1;
    const int64_t wsize = g.out_channels * d.CK;
    std::vector<std::vector<float>> partial(static_cast<size_t>(threads));
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
      std::vector<float>& sums = partial[static_cast<size_t>(omp_get_thread_num())];
      sums.assign(static_cast<size_t>(wsize), 0.0f);
#pragma omp for schedule(static)
      for (int64_t n = 0; n < g.batch; ++n)
        for (int64_t gi = 0; gi < d.G; ++gi) {
          const BFloat16* xg = x + (n * g.in_channels + gi * d.Cg) * d.HW;
          const BFloat16* cols = xg;
          if (!no_im2col(g)) {
            BFloat16* buf = thread_buffer<BFloat16>(Slot::kOperandB, d.CK * d.P);
            im2col(g, d, xg, buf);
            cols = buf;
          }
          Bf16GemmOut out;
          out.f32 = sums.data() + gi * d.Kg * d.CK, out.ldc = d.CK, out.accumulate = true;
          bf16_gemm(false, true, d.Kg, d.CK, d.P, dy + (n * g.out_channels + gi * d.Kg) * d.P, d.P, cols, d.P, out);
        }
    }
    BFloat16* dw = dw_t.data_ptr<BFloat16>();
    for (int64_t i = 0; i < wsize; ++i) {
      float s = 0.0f;
      for (const auto& p : partial) s += p[static_cast<size_t>(i)];
      dw[i] = BFloat16(s);
    }
  }
  if (dbias_t.defined()) {
    BFloat16* db = dbias_t.data_ptr<BFloat16>();
    for (int64_t k = 0; k < g.out_channels; ++k) {
      float s = 0.0f;
      for (int64_t n = 0; n < g.batch; ++n) {
        const BFloat16* p = dy + (n * g.out_channels + k) * d.P;
        for (int64_t q = 0; q < d.P; ++q) s += static_cast<float>(p[q]);
      }
      db[k] = BFloat16(s);
    }
  }
}

}  // namespace minidl::cpu
