// bfloat16 conv2d on small padded maps by one GEMM per kernel tap, over only
// the output pixels at which that tap reads inside the input
// (ops/cpu/conv2d_bf16_taps.h says where and why). With stride 1 and
// dilation 1, tap (a, b) reads input (oh - pad_h + a, ow - pad_w + b) for
// output (oh, ow): inside the input on a rectangle of output pixels. Per tap
// t, with W_t the K x C weights of the tap and X_t the C x (images x
// rectangle) input values it reads:
//   forward      Y += W_t X_t                 (float32, scattered to the rectangle)
//   grad input   dX += W_t^T dY_t             (float32, scattered to the read pixels)
//   grad weight  dW_t = dY_t X_t^T            (each weight from one tap: rounded once)
// The GEMMs are bf16_gemm's (dot products, float32 sums, its own threads);
// gathers and scatters run on OpenMP threads. Each output is rounded once.
#include "minidl/ops/cpu/conv2d_bf16_taps.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "minidl/ops/cpu/bf16_gemm.h"
#include "minidl/ops/cpu/conv2d_gemm.h"

namespace minidl::cpu {

namespace {

using conv2d_gemm::Slot;
using conv2d_gemm::thread_buffer;

// The output rectangle [oh0, oh1) x [ow0, ow1) where tap (a, b) reads inside
// the input, as index lists: pixel i of the rectangle (row-major) is output
// pixel p[i] and reads input pixel q[i].
struct Tap {
  int64_t index;  // a kW + b
  std::vector<int32_t> p, q;
  int64_t count() const { return static_cast<int64_t>(p.size()); }
};

std::vector<Tap> taps_of(const Conv2dGeometry& g) {
  std::vector<Tap> taps;
  for (int64_t a = 0; a < g.kernel_h; ++a)
    for (int64_t b = 0; b < g.kernel_w; ++b) {
      Tap t{a * g.kernel_w + b, {}, {}};
      const int64_t oh0 = std::clamp<int64_t>(g.pad_h - a, 0, g.out_h);
      const int64_t oh1 = std::clamp<int64_t>(g.in_h + g.pad_h - a, oh0, g.out_h);
      const int64_t ow0 = std::clamp<int64_t>(g.pad_w - b, 0, g.out_w);
      const int64_t ow1 = std::clamp<int64_t>(g.in_w + g.pad_w - b, ow0, g.out_w);
      for (int64_t oh = oh0; oh < oh1; ++oh)
        for (int64_t ow = ow0; ow < ow1; ++ow) {
          t.p.push_back(static_cast<int32_t>(oh * g.out_w + ow));
          t.q.push_back(static_cast<int32_t>((oh - g.pad_h + a) * g.in_w + (ow - g.pad_w + b)));
        }
      taps.push_back(std::move(t));
    }
  return taps;
}

int threads_for(int64_t rows) { return rows >= 64 ? omp_get_max_threads() : 1; }

const uint16_t* bits(const BFloat16* p) { return reinterpret_cast<const uint16_t*>(p); }
uint16_t* bits(BFloat16* p) { return reinterpret_cast<uint16_t*>(p); }

// An NCHW tensor's planes in (channel, image) order: rows x N planes, so
// that each tap's gather below reads one channel's planes in a row (in NCHW
// order a channel's planes of consecutive images lie C planes apart: at 32
// bytes a 4x4 plane the gathers then took 12.9% of a 512 -> 512 4x4 conv's
// forward + backward instead of 7.9%, 64.0 against 62.0 ms, Zen 4, 1 thread).
const BFloat16* by_channel(const Conv2dGeometry& g, const BFloat16* src, int64_t rows, int64_t plane, Slot slot) {
  BFloat16* dst = thread_buffer<BFloat16>(slot, rows * g.batch * plane);
#pragma omp parallel for schedule(static) num_threads(threads_for(rows))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t n = 0; n < g.batch; ++n)
      std::memcpy(dst + (r * g.batch + n) * plane, src + (n * rows + r) * plane,
                  static_cast<size_t>(plane) * sizeof(BFloat16));
  return dst;
}

// dst (rows x (N v)): dst[r][n v + i] = src[(r N + n) plane + pixel[i]], src by_channel's.
void gather(const Conv2dGeometry& g, const std::vector<int32_t>& pixel, const BFloat16* src, int64_t rows,
            int64_t plane, BFloat16* dst) {
  const int64_t v = static_cast<int64_t>(pixel.size()), ld = g.batch * v;
  const int32_t* idx = pixel.data();
#pragma omp parallel for schedule(static) num_threads(threads_for(rows))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t n = 0; n < g.batch; ++n) {
      const uint16_t* s = bits(src) + (r * g.batch + n) * plane;
      uint16_t* d = bits(dst) + r * ld + n * v;
      for (int64_t i = 0; i < v; ++i) d[i] = s[idx[i]];
    }
}

// acc[(r N + n) plane + pixel[i]] += prod[r][n v + i] for each row r < rows.
void scatter_add(const Conv2dGeometry& g, const std::vector<int32_t>& pixel, const float* prod, int64_t rows,
                 int64_t plane, float* acc) {
  const int64_t v = static_cast<int64_t>(pixel.size()), ld = g.batch * v;
  const int32_t* idx = pixel.data();
#pragma omp parallel for schedule(static) num_threads(threads_for(rows))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t n = 0; n < g.batch; ++n) {
      const float* o = prod + r * ld + n * v;
      float* a = acc + (r * g.batch + n) * plane;
      for (int64_t i = 0; i < v; ++i) a[idx[i]] += o[i];
    }
}

// W_t for every tap, K x C each: wt[(t K + k) C + c] = w[(k C + c) T + t]
// (each output channel's C x T block lies in L1 while it is read across).
BFloat16* weights_by_tap(const Conv2dGeometry& g, const BFloat16* w) {
  const int64_t K = g.out_channels, C = g.in_channels, T = g.kernel_h * g.kernel_w;
  BFloat16* wt = thread_buffer<BFloat16>(Slot::kWeights, T * K * C);
#pragma omp parallel for schedule(static) num_threads(threads_for(K))
  for (int64_t k = 0; k < K; ++k) {
    const uint16_t* s = bits(w) + k * C * T;
    for (int64_t t = 0; t < T; ++t) {
      uint16_t* d = bits(wt) + (t * K + k) * C;
      for (int64_t c = 0; c < C; ++c) d[c] = s[c * T + t];
    }
  }
  return wt;
}

// A float32 buffer of n zeros, kept between calls (a fresh one costs its page faults).
float* zeroed(Slot slot, int64_t n) {
  float* p = thread_buffer<float>(slot, n);
  std::fill_n(p, n, 0.0f);
  return p;
}

Bf16GemmOut float_out(float* c, int64_t ldc) {
  Bf16GemmOut out;
  out.f32 = c, out.ldc = ldc;
  return out;
}

}  // namespace

bool conv2d_bf16_taps_applies(const Conv2dGeometry& g) {
  return g.groups == 1 && g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 && g.dilation_w == 1 &&
         g.kernel_h * g.kernel_w > 1 && (g.pad_h > 0 || g.pad_w > 0) && g.out_h * g.out_w <= kConvTapsMaxPixels &&
         g.batch > 0 && g.out_h > 0 && g.out_w > 0;
}

namespace {

// The forward (dst = y = sum_t W_t X_t + bias, X_t the input values tap t
// reads, scattered to the output pixels that read them) and, transposed, the
// grad input (dst = dx = sum_t W_t^T dY_t, dY_t the gradient at the tap's
// output pixels, scattered to the input pixels they read): float32 sums,
// each element of dst rounded once.
void correlate_taps(const Conv2dGeometry& g, bool transposed, const BFloat16* src, const BFloat16* w,
                    const BFloat16* bias, BFloat16* dst) {
  const int64_t N = g.batch, C = g.in_channels, K = g.out_channels, P = g.out_h * g.out_w, HW = g.in_h * g.in_w;
  const int64_t src_rows = transposed ? K : C, src_plane = transposed ? P : HW;
  const int64_t dst_rows = transposed ? C : K, dst_plane = transposed ? HW : P;
  const BFloat16* wt = weights_by_tap(g, w);
  const BFloat16* src_by_channel = by_channel(g, src, src_rows, src_plane, Slot::kTransform);
  float* acc = zeroed(Slot::kSums, dst_rows * N * dst_plane);  // [row][n][pixel]
  for (const Tap& t : taps_of(g)) {
    const int64_t ld = N * t.count();
    if (ld == 0) continue;
    BFloat16* operand = thread_buffer<BFloat16>(Slot::kOperandB, src_rows * ld);
    float* prod = thread_buffer<float>(Slot::kProduct, dst_rows * ld);
    gather(g, transposed ? t.p : t.q, src_by_channel, src_rows, src_plane, operand);
    // op(A) = W_t (K x C) or W_t^T, stored as W_t either way.
    bf16_gemm(transposed, false, dst_rows, ld, src_rows, wt + t.index * K * C, C, operand, ld, float_out(prod, ld));
    scatter_add(g, transposed ? t.q : t.p, prod, dst_rows, dst_plane, acc);
  }
#pragma omp parallel for schedule(static) num_threads(threads_for(dst_rows))
  for (int64_t r = 0; r < dst_rows; ++r) {
    const float b = bias ? static_cast<float>(bias[r]) : 0.0f;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t q = 0; q < dst_plane; ++q)
        dst[(n * dst_rows + r) * dst_plane + q] = BFloat16(acc[(r * N + n) * dst_plane + q] + b);
  }
}

}  // namespace

void conv2d_forward_bf16_taps(const Conv2dGeometry& g, const BFloat16* x, const BFloat16* w, const BFloat16* bias,
                              BFloat16* y) {
  correlate_taps(g, /*transposed=*/false, x, w, bias, y);
}

void conv2d_backward_input_bf16_taps(const Conv2dGeometry& g, const BFloat16* dy, const BFloat16* w, BFloat16* dx) {
  correlate_taps(g, /*transposed=*/true, dy, w, nullptr, dx);
}

void conv2d_backward_weight_bf16_taps(const Conv2dGeometry& g, const BFloat16* dy, const BFloat16* x, BFloat16* dw) {
  const int64_t N = g.batch, C = g.in_channels, K = g.out_channels, P = g.out_h * g.out_w, HW = g.in_h * g.in_w;
  const int64_t T = g.kernel_h * g.kernel_w;
  const BFloat16* dy_by_channel = by_channel(g, dy, K, P, Slot::kRows);
  const BFloat16* x_by_channel = by_channel(g, x, C, HW, Slot::kTransform);
  for (const Tap& t : taps_of(g)) {
    const int64_t ld = N * t.count();
    float* prod = zeroed(Slot::kProduct, K * C);  // stays 0 for a tap that reads only padding
    if (ld > 0) {
      BFloat16* dyt = thread_buffer<BFloat16>(Slot::kOperandA, K * ld);
      BFloat16* cols = thread_buffer<BFloat16>(Slot::kOperandB, C * ld);
      gather(g, t.p, dy_by_channel, K, P, dyt);
      gather(g, t.q, x_by_channel, C, HW, cols);
      // dW_t (K x C) = dY_t (K x N v) X_t^T; op(B) = X_t^T, stored as X_t (C x N v).
      bf16_gemm(false, true, K, C, ld, dyt, ld, cols, ld, float_out(prod, C));
    }
#pragma omp parallel for schedule(static) num_threads(threads_for(K))
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < C; ++c) dw[(k * C + c) * T + t.index] = BFloat16(prod[k * C + c]);
  }
}

}  // namespace minidl::cpu
