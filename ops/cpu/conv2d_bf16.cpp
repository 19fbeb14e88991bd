// conv2d on bfloat16 operands through bf16_gemm (ops/cpu/bf16_kernels.h):
// im2col, then one GEMM per chunk of images and group (maps of at most 16
// output pixels with padding: a GEMM per kernel tap, ops/cpu/conv2d_bf16_taps.h). With CK = C/groups *
// kH * kW, P = out_h * out_w, J = images * P (a chunk's output pixels), W_g
// the group's weights as a Kg x CK matrix (their memory order) and cols the
// CK x J im2col matrix of the chunk:
//   forward      Y = W_g cols + bias                (float32 sums, rounded once)
//   grad input   stride 1: the forward correlation of dy (padded by
//                d*(k-1) - p) with the flipped kernel, transposed, as
//                ops/cpu/conv2d_im2col.cpp does; otherwise dcols = W_g^T dY
//                (float32) added back to the pixels (col2im), rounded once
//   grad weight  dW_g += dY cols^T over the chunks, float32 sums per thread
//                added up at the end and rounded once; dbias the float32 sum of dy
// Chunks: images enough that J >= kMinCols (the packed weights then serve
// enough columns; a 4x4 map alone has 16), and at least one chunk per thread.
// Threads take whole chunks, their GEMMs single-threaded; a single chunk
// (one image) lets the GEMM split itself. im2col copies each input plane once
// into a zero-bordered buffer and takes every row from there (strided
// convolutions, maps narrower than 16), or, on wider "same" maps, shifts whole
// planes. A 1x1 kernel with stride 1 and no
// padding needs no im2col for a one-image chunk: cols is the image.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "minidl/ops/cpu/bf16_gemm.h"
#include "minidl/ops/cpu/bf16_kernels.h"
#include "minidl/ops/cpu/conv2d_bf16_taps.h"
#include "minidl/ops/cpu/conv2d_gemm.h"
#include "minidl/ops/cpu/conv2d_kernels.h"
#include "minidl/ops/cpu/convert_half.h"

namespace minidl::cpu {

namespace {

using conv2d_gemm::ceil_div;
using conv2d_gemm::Slot;
using conv2d_gemm::thread_buffer;

constexpr int64_t kMinCols = 512;

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

// Calls f(c, row, oh, ih, b, lo, hi) for each row of cols and output row:
// row = (c * kH + a) * kW + b; ih outside [0, in_h) when it reads padding.
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

// dst[0, n) = bfloat16 0 (all bits 0): memset, which std::fill of the
// BFloat16 struct did not become (element by element, a tenth of im2col).
inline void zero_fill(BFloat16* dst, int64_t n) {
  if (n > 0) std::memset(dst, 0, static_cast<size_t>(n) * sizeof(BFloat16));
}

// im2col for stride 1 and out_w == in_w ("same" padding): each row of cols
// is its input plane shifted, so one copy per row, then the columns that
// wrapped around into the neighbouring input row set to 0.
void im2col_same(const Conv2dGeometry& g, const Dims& d, const BFloat16* x, BFloat16* cols, int64_t ld) {
  const BFloat16 zero = BFloat16::from_bits(0);
  const int64_t W = g.in_w, plane = g.out_h * W;
  for (int64_t c = 0; c < d.Cg; ++c)
    for (int64_t a = 0; a < g.kernel_h; ++a)
      for (int64_t b = 0; b < g.kernel_w; ++b) {
        BFloat16* dst = cols + ((c * g.kernel_h + a) * g.kernel_w + b) * ld;
        int64_t lo, hi;
        valid_columns(g, b, lo, hi);
        const int64_t dh = a * g.dilation_h - g.pad_h;  // ih = oh + dh
        const int64_t oh_lo = std::clamp<int64_t>(-dh, 0, g.out_h);
        const int64_t oh_hi = std::clamp<int64_t>(g.in_h - dh, oh_lo, g.out_h);
        if (oh_lo == oh_hi || lo >= hi) {
          zero_fill(dst, plane);
          continue;
        }
        // Output (oh, ow) reads src[oh * W + ow]; copy from the first valid element to the last.
        const BFloat16* src = x + c * d.HW + dh * W + b * g.dilation_w - g.pad_w;
        const int64_t first = oh_lo * W + lo, last = (oh_hi - 1) * W + hi;
        zero_fill(dst, first);
        std::memcpy(dst + first, src + first, static_cast<size_t>(last - first) * sizeof(BFloat16));
        zero_fill(dst + last, plane - last);
        for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {  // usually one element per row
          for (int64_t ow = 0; ow < lo; ++ow) dst[oh * W + ow] = zero;
          for (int64_t ow = hi; ow < W; ++ow) dst[oh * W + ow] = zero;
        }
      }
}

// d[0, n) = s[0, n * step) at step 1 or 2, 8 (or 4) elements per vector move.
// Reads up to one element past s[(n - 1) * step] (kPlaneSlack covers it).
inline void copy_row(uint16_t* d, const uint16_t* s, int64_t n, int64_t step) {
  typedef uint16_t U4 __attribute__((vector_size(8)));
  typedef uint16_t U8 __attribute__((vector_size(16)));
  int64_t i = 0;
  if (step == 1) {
    for (; i + 8 <= n; i += 8) std::memcpy(d + i, s + i, sizeof(U8));
    for (; i + 4 <= n; i += 4) std::memcpy(d + i, s + i, sizeof(U4));
    for (; i < n; ++i) d[i] = s[i];
    return;
  }
  if (step == 2) {
    for (; i + 8 <= n; i += 8) {
      U8 a, b;
      std::memcpy(&a, s + 2 * i, sizeof a);
      std::memcpy(&b, s + 2 * i + 8, sizeof b);
      const U8 even = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
      std::memcpy(d + i, &even, sizeof even);
    }
    for (; i + 4 <= n; i += 4) {
      U8 a;
      std::memcpy(&a, s + 2 * i, sizeof a);
      const U4 even = __builtin_shufflevector(a, a, 0, 2, 4, 6);
      std::memcpy(d + i, &even, sizeof even);
    }
  }
  for (; i < n; ++i) d[i] = s[i * step];
}
constexpr int64_t kPlaneSlack = 16;

// im2col through a zero-bordered copy of each input plane (Slot::kTransform,
// unused otherwise by the bfloat16 kernels): every output row of every tap is
// then one vector copy, or gather, without bounds checks. On small maps and
// strided convolutions the per-row bounds work of the direct version cost as
// much as a third of the forward.
void im2col_padded(const Conv2dGeometry& g, const Dims& d, const BFloat16* x, BFloat16* cols, int64_t ld) {
  const int64_t PH = g.in_h + 2 * g.pad_h, PW = g.in_w + 2 * g.pad_w, OW = g.out_w;
  BFloat16* pp = thread_buffer<BFloat16>(Slot::kTransform, PH * PW + kPlaneSlack);
  zero_fill(pp, PH * PW + kPlaneSlack);  // the border stays 0; the interior is overwritten per channel
  for (int64_t c = 0; c < d.Cg; ++c) {
    for (int64_t ih = 0; ih < g.in_h; ++ih)
      std::memcpy(pp + (ih + g.pad_h) * PW + g.pad_w, x + c * d.HW + ih * g.in_w,
                  static_cast<size_t>(g.in_w) * sizeof(BFloat16));
    for (int64_t a = 0; a < g.kernel_h; ++a)
      for (int64_t b = 0; b < g.kernel_w; ++b) {
        // Output (oh, ow) reads pp[(oh * sh + a * dh) * PW + ow * sw + b * dw]: always inside pp.
        uint16_t* dst = reinterpret_cast<uint16_t*>(cols + ((c * g.kernel_h + a) * g.kernel_w + b) * ld);
        const uint16_t* src = reinterpret_cast<const uint16_t*>(pp + a * g.dilation_h * PW + b * g.dilation_w);
        for (int64_t oh = 0; oh < g.out_h; ++oh, dst += OW, src += g.stride_h * PW) copy_row(dst, src, OW, g.stride_w);
      }
  }
}

// cols (CK rows, pitch ld) of one image's group x (Cg planes).
void im2col(const Conv2dGeometry& g, const Dims& d, const BFloat16* x, BFloat16* cols, int64_t ld) {
  if (g.stride_h == 1 && g.stride_w == 1 && g.out_w == g.in_w && g.out_w >= 16) return im2col_same(g, d, x, cols, ld);
  im2col_padded(g, d, x, cols, ld);
}

// dx (Cg planes, float32) += dcols (CK rows, pitch ld) put back where im2col took it.
void col2im(const Conv2dGeometry& g, const Dims& d, const float* dcols, int64_t ld, float* dx) {
  for_each_cols_row(g, d.Cg, [&](int64_t c, int64_t row, int64_t oh, int64_t ih, int64_t b, int64_t lo, int64_t hi) {
    if (ih < 0 || ih >= g.in_h) return;
    const float* src = dcols + row * ld + oh * g.out_w;
    float* dst = dx + c * d.HW + ih * g.in_w + b * g.dilation_w - g.pad_w;
    if (g.stride_w == 1)
      for (int64_t ow = lo; ow < hi; ++ow) dst[ow] += src[ow];
    else
      for (int64_t ow = lo; ow < hi; ++ow) dst[ow * g.stride_w] += src[ow];
  });
}

struct Chunks {
  int threads;
  int64_t images, count;  // images per chunk, chunks
};
Chunks chunks(const Conv2dGeometry& g, const Dims& d) {
  Chunks c;
  c.threads = conv2d_threads(g);
  c.images = std::clamp<int64_t>(ceil_div(kMinCols, std::max<int64_t>(d.P, 1)), 1,
                                 std::max<int64_t>(1, ceil_div(g.batch, c.threads)));
  c.count = ceil_div(g.batch, c.images);
  return c;
}

// f(n0, images, tid) for each chunk, chunks spread over the threads: to
// whichever is free, unless `fixed`: then always to the same thread, so
// per-thread sums (the weight gradient's) add up in the same order every run.
template <class F>
void for_each_chunk(const Conv2dGeometry& g, const Chunks& c, F f, bool fixed = false) {
  auto run = [&](int64_t i) { f(i * c.images, std::min(c.images, g.batch - i * c.images), omp_get_thread_num()); };
  if (fixed) {
#pragma omp parallel for schedule(static, 1) num_threads(c.threads) if (c.threads > 1 && c.count > 1)
    for (int64_t i = 0; i < c.count; ++i) run(i);
  } else {
#pragma omp parallel for schedule(dynamic, 1) num_threads(c.threads) if (c.threads > 1 && c.count > 1)
    for (int64_t i = 0; i < c.count; ++i) run(i);
  }
}

// The chunk's planes of one group of a (N, channels, plane) tensor side by
// side: [ch][image * plane + q], pitch images * plane; the tensor itself
// when the chunk is one image.
const BFloat16* gather_chunk(const BFloat16* t, int64_t channels, int64_t plane, int64_t c0, int64_t cg, int64_t n0,
                             int64_t images, Slot slot) {
  if (images == 1) return t + (n0 * channels + c0) * plane;
  BFloat16* buf = thread_buffer<BFloat16>(slot, cg * images * plane);
  for (int64_t ch = 0; ch < cg; ++ch)
    for (int64_t i = 0; i < images; ++i)
      std::memcpy(buf + ch * images * plane + i * plane, t + ((n0 + i) * channels + c0 + ch) * plane,
                  static_cast<size_t>(plane) * sizeof(BFloat16));
  return buf;
}

// cols of the chunk for group gi: [CK][images * P].
const BFloat16* chunk_cols(const Conv2dGeometry& g, const Dims& d, const BFloat16* x, int64_t gi, int64_t n0,
                           int64_t images) {
  if (images == 1 && no_im2col(g)) return x + (n0 * g.in_channels + gi * d.Cg) * d.HW;
  const int64_t ld = images * d.P;
  BFloat16* cols = thread_buffer<BFloat16>(Slot::kOperandB, d.CK * ld);
  for (int64_t i = 0; i < images; ++i) im2col(g, d, x + ((n0 + i) * g.in_channels + gi * d.Cg) * d.HW, cols + i * d.P, ld);
  return cols;
}

void forward(const Conv2dGeometry& g, const BFloat16* x, const BFloat16* w, const BFloat16* bias, BFloat16* y) {
  const Dims d(g);
  const Chunks c = chunks(g, d);
  for_each_chunk(g, c, [&](int64_t n0, int64_t images, int) {
    const int64_t ld = images * d.P;
    for (int64_t gi = 0; gi < d.G; ++gi) {
      const BFloat16* cols = chunk_cols(g, d, x, gi, n0, images);
      Bf16GemmOut out;
      // One image: straight into y; else [Kg][images * P], then each image's block to y.
      out.bf16 = images == 1 ? y + (n0 * g.out_channels + gi * d.Kg) * d.P
                             : thread_buffer<BFloat16>(Slot::kOperandA, d.Kg * ld);
      out.ldc = ld;
      out.row_bias = bias ? bias + gi * d.Kg : nullptr;
      bf16_gemm(false, false, d.Kg, ld, d.CK, w + gi * d.Kg * d.CK, d.CK, cols, ld, out);
      if (images > 1)
        for (int64_t k = 0; k < d.Kg; ++k)
          for (int64_t i = 0; i < images; ++i)
            std::memcpy(y + ((n0 + i) * g.out_channels + gi * d.Kg + k) * d.P, out.bf16 + k * ld + i * d.P,
                        static_cast<size_t>(d.P) * sizeof(BFloat16));
    }
  });
}

// Stride 1: dx is the forward correlation of dy, padded by d*(k-1) - p, with
// the kernel flipped and each group's (Kg, Cg) transposed.
bool backward_input_as_forward(const Conv2dGeometry& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.pad_h <= g.dilation_h * (g.kernel_h - 1) &&
         g.pad_w <= g.dilation_w * (g.kernel_w - 1);
}

// One row of flip_transpose: dst[k][t'] = src[k * pitch + taps - 1 - t'] for k < Kg.
template <int64_t kTaps>
inline void flip_row(const uint16_t* src, int64_t pitch, int64_t Kg, int64_t taps, uint16_t* dst) {
  const int64_t n = kTaps > 0 ? kTaps : taps;
  for (int64_t k = 0; k < Kg; ++k, src += pitch, dst += n)
    for (int64_t t = 0; t < n; ++t) dst[t] = src[n - 1 - t];
}

// wt[gi * Cg + c][k][t'] = w[gi * Kg + k][c][taps - 1 - t'], rows of wt
// (contiguous writes) over the threads. Once per backward call; the
// k-outer scalar loop it replaces, on one thread, took ~1 ms at 256x256x3x3.
void flip_transpose(const Dims& d, int64_t taps, const BFloat16* w, BFloat16* wt, int threads) {
  const uint16_t* src = reinterpret_cast<const uint16_t*>(w);
  uint16_t* dst = reinterpret_cast<uint16_t*>(wt);
  const int64_t rows = d.G * d.Cg;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && rows * d.Kg * taps >= (1 << 16))
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t gi = row / d.Cg, c = row % d.Cg;
    const uint16_t* s = src + (gi * d.Kg * d.Cg + c) * taps;  // w[gi * Kg + 0][c][0]
    uint16_t* o = dst + row * d.Kg * taps;
    if (taps == 9) flip_row<9>(s, d.Cg * taps, d.Kg, taps, o);
    else if (taps == 1) flip_row<1>(s, d.Cg * taps, d.Kg, taps, o);
    else flip_row<0>(s, d.Cg * taps, d.Kg, taps, o);
  }
}

void backward_input(const Conv2dGeometry& g, const BFloat16* dy, const BFloat16* w, BFloat16* dx) {
  const Dims d(g);
  const int64_t taps = g.kernel_h * g.kernel_w;
  if (backward_input_as_forward(g)) {
    Conv2dGeometry gt = g;
    gt.in_channels = g.out_channels, gt.in_h = g.out_h, gt.in_w = g.out_w, gt.out_channels = g.in_channels;
    gt.pad_h = g.dilation_h * (g.kernel_h - 1) - g.pad_h;
    gt.pad_w = g.dilation_w * (g.kernel_w - 1) - g.pad_w;
    conv2d_set_output_size(gt);  // = in_h x in_w
    BFloat16* wt = thread_buffer<BFloat16>(Slot::kWeights, g.out_channels * d.CK);
    flip_transpose(d, taps, w, wt, conv2d_threads(g));
    return forward(gt, dy, wt, nullptr, dx);
  }
  const Chunks c = chunks(g, d);
  for_each_chunk(g, c, [&](int64_t n0, int64_t images, int) {
    const int64_t ld = images * d.P;
    for (int64_t gi = 0; gi < d.G; ++gi) {
      const BFloat16* dyc = gather_chunk(dy, g.out_channels, d.P, gi * d.Kg, d.Kg, n0, images, Slot::kOperandA);
      float* dcols = thread_buffer<float>(Slot::kProduct, d.CK * ld);
      Bf16GemmOut out;
      out.f32 = dcols, out.ldc = ld;
      bf16_gemm(true, false, d.CK, ld, d.Kg, w + gi * d.Kg * d.CK, d.CK, dyc, ld, out);
      float* plane = thread_buffer<float>(Slot::kRows, d.Cg * d.HW);
      for (int64_t i = 0; i < images; ++i) {
        std::fill_n(plane, d.Cg * d.HW, 0.0f);
        col2im(g, d, dcols + i * d.P, ld, plane);
        BFloat16* dxg = dx + ((n0 + i) * g.in_channels + gi * d.Cg) * d.HW;
        for (int64_t j = 0; j < d.Cg * d.HW; ++j) dxg[j] = BFloat16(plane[j]);
      }
    }
  });
}

// sums (out_channels x CK, the weight's memory order) += dW of the chunk's
// images: dY cols^T per group, float32.
void accumulate_weight_grad(const Conv2dGeometry& g, const Dims& d, int64_t n0, int64_t images, const BFloat16* dy,
                            const BFloat16* x, float* sums) {
  const int64_t ld = images * d.P;
  for (int64_t gi = 0; gi < d.G; ++gi) {
    const BFloat16* cols = chunk_cols(g, d, x, gi, n0, images);
    const BFloat16* dyc = gather_chunk(dy, g.out_channels, d.P, gi * d.Kg, d.Kg, n0, images, Slot::kOperandA);
    Bf16GemmOut out;
    out.f32 = sums + gi * d.Kg * d.CK, out.ldc = d.CK, out.accumulate = true;
    bf16_gemm(false, true, d.Kg, d.CK, ld, dyc, ld, cols, ld, out);
  }
}

void backward_weight(const Conv2dGeometry& g, const BFloat16* dy, const BFloat16* x, BFloat16* dw) {
  const Dims d(g);
  const Chunks c = chunks(g, d);
  const int64_t wsize = g.out_channels * d.CK;
  // Per thread, all groups; each thread's own kSums buffer, kept between calls
  // (a fresh one would cost its page faults on every call).
  std::vector<float*> partial(static_cast<size_t>(c.threads), nullptr);
  for_each_chunk(g, c, [&](int64_t n0, int64_t images, int tid) {
    float*& sums = partial[static_cast<size_t>(tid)];
    if (!sums) {
      sums = thread_buffer<float>(Slot::kSums, wsize);
      std::fill_n(sums, wsize, 0.0f);
    }
    accumulate_weight_grad(g, d, n0, images, dy, x, sums);
  }, /*fixed=*/true);
  // The threads' sums added in thread order and rounded, in blocks over the
  // threads (one thread alone took ~2% of the step at 1 thread, 512x512x3x3).
  constexpr int64_t kBlock = 2048;
  const auto to_bf16 = half_convert_kernels().f32_to_bf16;
  const int64_t blocks = ceil_div(wsize, kBlock);
#pragma omp parallel for schedule(static) num_threads(c.threads) if (c.threads > 1 && blocks > 8)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * kBlock, n = std::min(kBlock, wsize - i0);
    float s[kBlock];
    std::fill_n(s, n, 0.0f);
    for (const float* p : partial)
      if (p)
        for (int64_t i = 0; i < n; ++i) s[i] += p[i0 + i];
    to_bf16(s, dw + i0, n);
  }
}

const BFloat16* ptr(const Tensor& t) { return t.defined() ? t.data_ptr<BFloat16>() : nullptr; }

}  // namespace

void conv2d_forward_bf16(const Conv2dGeometry& g, const BFloat16* x, const BFloat16* w, const BFloat16* bias,
                         BFloat16* y) {
  if (conv2d_bf16_taps_applies(g)) return conv2d_forward_bf16_taps(g, x, w, bias, y);
  forward(g, x, w, bias, y);
}

void conv2d_backward_input_bf16(const Conv2dGeometry& g, const BFloat16* dy, const BFloat16* w, BFloat16* dx) {
  if (conv2d_bf16_taps_applies(g)) return conv2d_backward_input_bf16_taps(g, dy, w, dx);
  backward_input(g, dy, w, dx);
}

void conv2d_forward_bf16(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                         const Tensor& y) {
  conv2d_forward_bf16(g, ptr(x), ptr(w), ptr(bias), y.data_ptr<BFloat16>());
}

void conv2d_backward_weight_bf16_accumulate(const Conv2dGeometry& g, const BFloat16* dy, const BFloat16* x,
                                            float* sums) {
  const Dims d(g);
  const int64_t images = std::clamp<int64_t>(ceil_div(kMinCols, std::max<int64_t>(d.P, 1)), 1, std::max<int64_t>(g.batch, 1));
  for (int64_t n0 = 0; n0 < g.batch; n0 += images) accumulate_weight_grad(g, d, n0, std::min(images, g.batch - n0), dy, x, sums);
}

void conv2d_backward_bf16(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                          const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  if (dx.defined()) conv2d_backward_input_bf16(g, ptr(dy), ptr(w), dx.data_ptr<BFloat16>());
  if (dw.defined()) {
    if (conv2d_bf16_taps_applies(g)) conv2d_backward_weight_bf16_taps(g, ptr(dy), ptr(x), dw.data_ptr<BFloat16>());
    else backward_weight(g, ptr(dy), ptr(x), dw.data_ptr<BFloat16>());
  }
  if (dbias.defined()) {
    const int64_t P = g.out_h * g.out_w;
    const BFloat16* pdy = ptr(dy);
    BFloat16* db = dbias.data_ptr<BFloat16>();
    for (int64_t k = 0; k < g.out_channels; ++k) {
      float s = 0.0f;
      for (int64_t n = 0; n < g.batch; ++n)
        for (int64_t q = 0; q < P; ++q) s += static_cast<float>(pdy[(n * g.out_channels + k) * P + q]);
      db[k] = BFloat16(s);
    }
  }
}

}  // namespace minidl::cpu
