// conv2d's CPU kernels on raw pointers: the rule that picks a path for each
// call (conv2d_pick_algo; the shifted planes of ops/cpu/conv2d_shifted.cpp,
// the im2col GEMM of ops/cpu/conv2d_im2col.cpp, or the Winograd transforms of
// ops/cpu/conv2d_winograd.cpp), the bias gradient they share, and the thread
// count a call is worth.
#include "minidl/core/backend_settings.h"
#include "minidl/ops/cpu/conv2d_kernels.h"
#include "minidl/ops/cpu/conv2d_chunk_plan.h"  // the images-innermost chunks

#include <omp.h>

#include <algorithm>
#include <limits>

namespace minidl {

int conv2d_threads(const Conv2dGeometry& g) {
  // A fork/join costs microseconds on a quiet machine, and a scheduler tick
  // (milliseconds) when another process holds the other core: only worth it
  // for at least this much work per thread.
  constexpr double kMinFlopsPerThread = 2e6;
  if (omp_in_parallel()) return 1;
  const double flops = 2.0 * static_cast<double>(g.batch) * static_cast<double>(g.out_channels) *
                       static_cast<double>(g.in_channels / g.groups) * static_cast<double>(g.kernel_h * g.kernel_w) *
                       static_cast<double>(g.out_h * g.out_w);
  return static_cast<int>(std::clamp(flops / kMinFlopsPerThread, 1.0, static_cast<double>(omp_get_max_threads())));
}

namespace {

template <class T>
void bias_grad(const Conv2dGeometry& g, const T* dy, T* dbias) {
  const int64_t out_hw = g.out_h * g.out_w;
#pragma omp parallel for schedule(static) num_threads(conv2d_threads(g))
  for (int64_t k = 0; k < g.out_channels; ++k) {
    double sum = 0;  // float32 sums over batch * pixels lose bits in float
    for (int64_t n = 0; n < g.batch; ++n) {
      const T* src = dy + (n * g.out_channels + k) * out_hw;
      T s = 0;
      for (int64_t i = 0; i < out_hw; ++i) s += src[i];
      sum += s;
    }
    dbias[k] = static_cast<T>(sum);
  }
}


}  // namespace

// The cost rule. The shifted-plane kernels compute one image at a time: the
// GEMM's column count is one output map (padded to its row pitch and to whole
// vectors), and every image streams all of w (forward, grad input) or all of
// dw's partial sums (grad weight) once. That is cheap while a map has many
// pixels per weight, and wasteful when the map is small and the channels
// many: at 4x4 with 512 channels, 32 columns (16 of them junk) per 9.4 MB of
// weights. The im2col path puts a chunk of images side by side instead, so
// its GEMM is big and blocked for cache whatever the map size, and it skips
// the taps that read padding (31% of the products at 4x4, 16% at 8x8); it
// pays for gathering each input pixel once per tap, which the shifted planes
// never do. Measured on the CIFAR ResNet shapes (bench/bench_ops.cpp), the
// crossover lies between 8x8 and 16x16 output maps, stride 1 or 2:
// shifted planes from kShiftedMinPixels output pixels up, im2col below.
//
// Winograd F(2x2, 3x3) does 2.25x fewer products for 3x3 stride-1 kernels but
// transforms every input and output value: per tile the transforms touch
// Cg + Kg channels and the GEMMs Cg * Kg channel pairs, so it wins where
// pairs per channel, Cg * Kg / (Cg + Kg), are many. Measured against the
// direct paths (single thread, batch 64-128; the table is in bench/RESULTS.md),
// forward and grad input: 8 pairs per channel (16 -> 16) 0.8x, 16 (32 -> 32)
// 1.03-1.1x, 32 (64 -> 64) 1.45-1.5x, 43-171 (64 -> 128 up to 256 -> 512)
// 1.6-1.9x, but 256 (512 -> 512 on 4x4 maps) only 1.1x. Grad weight gains
// less and loses more: 0.36x at 16 -> 16, 0.74-0.79x at 32 -> 32, 0.98-1.1x
// at 64 -> 64, 1.3-1.6x from 64 -> 128 up; and it sums every chunk of tiles
// into all 16 * Cg * Kg transformed weight gradients, which on 4x4 maps
// (4 tiles per image) with 512 channels made it 0.81x: there, and wherever a
// map has fewer than kWinogradMinTiles tiles, grad weight takes the
// direct path. With AVX-512 the forward and grad input do too: on such maps
// the direct (im2col) path skips 31% of the products (padding taps) that
// Winograd's transforms cannot, and its GEMM runs twice as wide while the
// transforms stay memory-bound. Measured on an AMD EPYC (Zen 5, 1 thread,
// CPU time, bench/bench_conv_shapes): 64 x 512 -> 512 on 4x4 maps, im2col
// 18-21 ms against Winograd's 25-26 forward and 24.6 against 25-28.7 grad
// input; 128 -> 128 on 4x4, 1.3 against 1.8 forward. With AVX2 (x86-64-v3)
// the forwards tie (33 ms each) and Winograd's grad input wins (31 against
// 38 ms), so AVX2 builds keep Winograd there. 8x8 maps (16 tiles) keep
// Winograd with either ISA (15 against 23 ms, 64 x 256 -> 256).
//
// Winograd F(4x4, 3x3) does 36 products per 16 outputs where F(2x2) does 64,
// and after vectorizing the weight transform and gathering the patches of
// short tile rows (ops/cpu/conv2d_winograd_tiles.h) it beats F(2x2) and the
// direct paths on every CIFAR ResNet shape, forward and grad input. Zen 4
// (AMD EPYC family 25, AVX-512), 1 thread, CPU time, bench/bench_conv_algos, ms direct / F(2x2)
// / F(4x4), forward (grad input alike): 64 x 64 -> 64 at 32x32 47.4 / 31.9 /
// 21.8; 128 -> 128 at 16x16 46.6 / 27.2 / 18.7; 256 -> 256 at 8x8 39.3 /
// 25.7 / 18.9; 512 -> 512 at 4x4 33.4 / 29.9 / 27.1 (grad input 34.9 / 31.4
// / 29.0); 128 x 32 -> 32 at 32x32 24.9 / 21.7 / 16.5 and at 16x16 6.6 / 6.4
// / 5.5, but 16 -> 16 at 32x32 6.9 / 8.3 / 7.1. Between (64 images, ms
// auto (direct) / F(4x4), forward and grad input): 20 -> 20 at 32x32 (10
// pairs per channel) 5.2 / 4.5 and 4.5; 32 -> 16 at 64x64 (10.7) 25.2 /
// 21.6 and 17.8; 48 -> 16 (12, conv3d's stacked depth slices of a 16 -> 16
// UNet3d level) 37.4 / 32.4 and 25.7; 16 -> 16 (8) at 64x64 13.4 / 11.3 and
// 11.9, at 32x32 3.3 / 3.3 and 3.2; 12 -> 12 (6) at 32x32 1.9 / 2.4. So F(4x4) from
// kWinograd4MinPairsPerChannel (10) pairs per channel, where its
// tiles need fewer products than F(2x2)'s (36 per 4x4 tile against 16 per
// 2x2 one: not on 1x1, 2x2, 5x5 or 6x6 maps, whose 4x4 tiles are mostly
// padding). Its grad weight (36 GEMMs over the tiles) wins from 32 pairs
// per channel, as F(2x2)'s did, and on 4x4 maps too (ms direct / F(2x2) /
// F(4x4), same machine, loaded): 64 x 64 -> 64 at 32x32 48.3 / 46.5 / 34.2,
// 128 -> 128 at 16x16 50.0 / 35.6 / 24.7, 256 -> 256 at 8x8 41.5 / 30.5 /
// 22.4, 512 -> 512 at 4x4 40.1 / 33.4 / 31.2, 128 x 64 -> 64 at 8x8 5.9 /
// 7.7 / 4.7; but 128 x 32 -> 32 at 32x32 27.8 / 37.1 / 28.1 and at 16x16
// 7.5 / 10.4 / 9.2: there grad weight takes the direct path.
// With AVX2 (x86-64-v3 build, same machine) F(4x4) wins the same way
// (forward 64 -> 64 at 32x32 50.6 / 33.1 / 23.7, 256 -> 256 at 8x8 40.1 /
// 25.2 / 19.5) except on maps of one 4x4 tile, where its forward and grad
// input lose to F(2x2) (64 x 256 -> 256 at 4x4: im2col 8.9, F(2x2) 8.1,
// F(4x4) 9.1; 512 -> 512 34.1 / 31.6 / 34.9; 128 -> 128 2.3 / 2.4 / 2.4):
// AVX2 builds keep the F(2x2) rule there (kWinograd4OnOneTile), while their
// grad weight still takes F(4x4) (7.4 against im2col's 9.3 and F(2x2)'s 8.5
// at 256 -> 256; 34.7 against 39.7 and 32.2 at 512 -> 512). With AVX-512,
// F(4x4) is the fastest on 4x4 maps in every pass (128 -> 128: 2.0 against
// im2col's 2.2 and F(2x2)'s 3.2 ms forward; 256 -> 256: 7.3 / 8.6 / 7.9).
// F(4x4)'s price is accuracy: 2-3 bits (tests/test_conv2d_winograd.cpp);
// backends::cpu::set_conv_allow_winograd4(false) keeps F(2x2) wherever
// F(4x4) would run, as cudnn.allow_tf32 trades bits for speed on GPUs.
// Strided weight gradients take the im2col path on every map size: the
// shifted planes compute every input pixel's products and drop the ones a
// stride skips, the im2col GEMM only the kept ones. Zen 5, 1 thread, CPU
// time, shifted against im2col: 64 x 64 -> 128 at 32x32, 3x3 stride 2,
// 17.6 against 14.7 ms; 1x1 stride 2, 7.4 against 2.4 ms; 16 x 64 -> 128 at
// 56x56: 13.1 against 11.0 (3x3), 5.6 against 1.5 ms (1x1).
namespace {

constexpr int64_t kShiftedMinPixels = 256;
constexpr int64_t kStridedForwardIm2colPixels = 16 * 16;  // see resolve
#if defined(__AVX512F__)
constexpr double kStridedForwardIm2colPairs = std::numeric_limits<double>::infinity();
constexpr double kStridedInputIm2colPairs = std::numeric_limits<double>::infinity();
#else
constexpr double kStridedForwardIm2colPairs = 20;  // see resolve
constexpr double kStridedInputIm2colPairs = 32;
#endif
constexpr double kWinogradMinPairsPerChannel = 32;
constexpr double kWinograd4MinPairsPerChannel = 10;
constexpr int64_t kWinogradMinTiles = 16;
#if defined(__AVX512F__)
constexpr bool kWinogradOnFewTiles = false;
constexpr bool kWinograd4OnOneTile = true;
#else
constexpr bool kWinogradOnFewTiles = true;  // forward and grad input only
constexpr bool kWinograd4OnOneTile = false;  // forward and grad input only
#endif

int64_t tiles_per_image(const Conv2dGeometry& g) { return (g.out_h + 1) / 2 * ((g.out_w + 1) / 2); }

int64_t tiles4_per_image(const Conv2dGeometry& g) { return (g.out_h + 3) / 4 * ((g.out_w + 3) / 4); }

// Whether F(4x4) needs fewer GEMM products per image than F(2x2).
bool winograd4_fewer_products(const Conv2dGeometry& g) { return 36 * tiles4_per_image(g) < 16 * tiles_per_image(g); }

Conv2dAlgo pick_direct(const Conv2dGeometry& g) {
  return g.out_h * g.out_w >= kShiftedMinPixels ? Conv2dAlgo::kShiftedPlanes : Conv2dAlgo::kIm2colGemm;
}

double pairs_per_channel(const Conv2dGeometry& g) {
  const double Cg = static_cast<double>(g.in_channels / g.groups), Kg = static_cast<double>(g.out_channels / g.groups);
  return Cg + Kg > 0 ? Cg * Kg / (Cg + Kg) : 0;
}

// The F(2x2) rule, which grad weight follows under F(4x4) too.
Conv2dAlgo pick_winograd2(const Conv2dGeometry& g, bool weight_grad) {
  if (conv2d_winograd_applies(g) && pairs_per_channel(g) >= kWinogradMinPairsPerChannel &&
      tiles_per_image(g) >= (weight_grad || !kWinogradOnFewTiles ? kWinogradMinTiles : 0))
    return Conv2dAlgo::kWinograd;
  return pick_direct(g);
}

}  // namespace

Conv2dAlgo conv2d_pick_algo(const Conv2dGeometry& g) {
  if (backends::cpu::conv_allow_winograd4() && conv2d_winograd_applies(g) &&
      pairs_per_channel(g) >= kWinograd4MinPairsPerChannel &&
      winograd4_fewer_products(g) && (kWinograd4OnOneTile || tiles4_per_image(g) > 1))
    return Conv2dAlgo::kWinograd4;
  return pick_winograd2(g, false);
}

// The path of one pass: `algo`, or conv2d_pick_algo's choice for kAuto,
// except that grad weight takes F(4x4) from 32 pairs per channel where its
// tiles need fewer products (whatever the forward took), else F(2x2) on maps
// of kWinogradMinTiles tiles or more, else the direct path;
// strided grad weight the im2col one (see above), and so do strided
// forwards up to 16x16 outputs: there the im2col GEMM also beats the
// shifted planes' computing of the skipped pixels (Zen 5, 1 thread, CPU
// time, 64 x 64 -> 128 at 32x32: 3x3 stride 2 13.4 against 15.7 ms, AVX2
// 22.3 against 25.6; 1x1 stride 2 1.9 against 3.3, AVX2 2.9 against 4.7).
// Larger outputs keep the rule (3x3 stride 2 from 40x40: 10.8 against 10.3).
// Not so with AVX2: on
// a Zen 3 (x86-64-v3, 2 threads, least of 4 rounds, ms im2col / shifted)
// the im2col GEMM wins strided forwards of every output size from
// kStridedForwardIm2colPairs (20) pairs per channel (16 x 64 -> 128 at 56x56,
// 3x3 stride 2: 12.2-14.7 / 18.2-22.5; 1x1: 1.6-1.8 / 2.7-4.2; 16 x 128 ->
// 256: 51.5 / 72.3; 8 x 32 -> 64 at 128x128: 11.3 / 13.8) but not below
// (8 x 16 -> 32 at 128x128: 5.3-5.6 / 3.3-4.9; 32 -> 32: 8.5 / 7.1).
// Strided grad input takes the im2col path, which computes it phase by
// phase (ops/cpu/conv2d_im2col_input.cpp), for 1x1 kernels and where the
// phases' stride-1 forwards get chunks of images innermost (kImageGroup
// times the output pixels within kMaxImageGroupCols: 16x16 outputs with
// AVX-512, 22x22 with AVX2); larger maps, whose forwards gather column by
// column, keep the shifted planes, except with AVX2 from
// kStridedInputIm2colPairs (32) pairs per channel (Zen 3, col2im / shifted:
// 16 x 48 -> 96 at 64x64 14.2 / 21.4, 16 x 128 -> 256 at 56x56 51.1 / 82.6;
// below, 8 x 32 -> 64 at 128x128, 15.1 / 13.7). Zen 4, 1 thread, CPU
// time, ms phases / the former col2im / shifted: 64 x 64 -> 128 at 32x32,
// 3x3 stride 2, 26.7 / 36.0 / 29.5 (AVX2 28.9 / 34.8 / 33.1); 64 x 16 -> 32
// at 32x32 2.5 / 4.0 / 2.7; 32 x 64 -> 128 at 40x40 24.3 / 24.3 / 21.6
// (AVX2 22.2 / 26.5 / 24.7); 16 x 64 -> 128 at 56x56 24.9 / 23.5 / 20.4;
// 1x1 stride 2, 16 x 64 -> 128 at 56x56, 3.8 / 6.6 / 4.3 (AVX2 4.1 / 8.9 /
// 5.1); AVX2, 16 x 128 -> 256 at 56x56, 86.2 / 83.7 / 105.4.
Conv2dAlgo conv2d_resolve_algo(const Conv2dGeometry& g, Conv2dPass pass, Conv2dAlgo algo) {
  if (algo != Conv2dAlgo::kAuto) return algo;
  algo = conv2d_pick_algo(g);
  const bool strided = g.stride_h > 1 || g.stride_w > 1;
  if ((algo == Conv2dAlgo::kWinograd || algo == Conv2dAlgo::kWinograd4) && pass == Conv2dPass::kWeight)
    algo = pairs_per_channel(g) < kWinogradMinPairsPerChannel ? pick_direct(g)
           : winograd4_fewer_products(g) && backends::cpu::conv_allow_winograd4() ? Conv2dAlgo::kWinograd4
                                                               : pick_winograd2(g, true);
  if (algo == Conv2dAlgo::kShiftedPlanes && strided) {
    const double pairs = pairs_per_channel(g);
    const bool forward_im2col = g.out_h * g.out_w <= kStridedForwardIm2colPixels || pairs >= kStridedForwardIm2colPairs;
    const bool input_im2col = g.kernel_h * g.kernel_w == 1 ||
                              conv2d_plan::kImageGroup * g.out_h * g.out_w <= conv2d_plan::kMaxImageGroupCols ||
                              pairs >= kStridedInputIm2colPairs;
    if (pass == Conv2dPass::kWeight || (pass == Conv2dPass::kForward && forward_im2col) ||
        (pass == Conv2dPass::kInput && input_im2col))
      algo = Conv2dAlgo::kIm2colGemm;
  }
  return algo;
}

// A Winograd pass whose input holds an inf or NaN is redone on the direct
// path (see conv2d_winograd_forward).
template <class T>
void conv2d_forward_kernel(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y, Conv2dAlgo algo) {
  switch (algo = conv2d_resolve_algo(g, Conv2dPass::kForward, algo)) {
    case Conv2dAlgo::kWinograd:
    case Conv2dAlgo::kWinograd4:
      if (conv2d_winograd_forward(g, x, w, bias, y, algo == Conv2dAlgo::kWinograd4 ? 4 : 2)) return;
      return conv2d_forward_kernel(g, x, w, bias, y, pick_direct(g));
    case Conv2dAlgo::kIm2colGemm: return conv2d_im2col_forward(g, x, w, bias, y);
    default: return conv2d_shifted_forward(g, x, w, bias, y);
  }
}

template <class T>
void conv2d_backward_input_kernel(const Conv2dGeometry& g, const T* dy, const T* w, T* dx, Conv2dAlgo algo) {
  switch (algo = conv2d_resolve_algo(g, Conv2dPass::kInput, algo)) {
    case Conv2dAlgo::kWinograd:
    case Conv2dAlgo::kWinograd4:
      if (conv2d_winograd_backward_input(g, dy, w, dx, algo == Conv2dAlgo::kWinograd4 ? 4 : 2)) return;
      return conv2d_backward_input_kernel(g, dy, w, dx, pick_direct(g));
    case Conv2dAlgo::kIm2colGemm: return conv2d_im2col_backward_input(g, dy, w, dx);
    default: return conv2d_shifted_backward_input(g, dy, w, dx);
  }
}

template <class T>
void conv2d_backward_weight_kernel(const Conv2dGeometry& g, const T* dy, const T* x, T* dw, T* dbias,
                                   Conv2dAlgo algo) {
  if (dw) switch (conv2d_resolve_algo(g, Conv2dPass::kWeight, algo)) {
      case Conv2dAlgo::kWinograd: conv2d_winograd_backward_weight(g, dy, x, dw, 2); break;
      case Conv2dAlgo::kWinograd4: conv2d_winograd_backward_weight(g, dy, x, dw, 4); break;
      case Conv2dAlgo::kIm2colGemm: conv2d_im2col_backward_weight(g, dy, x, dw); break;
      default: conv2d_shifted_backward_weight(g, dy, x, dw);
    }
  if (dbias) bias_grad(g, dy, dbias);
}

template void conv2d_forward_kernel<float>(const Conv2dGeometry&, const float*, const float*, const float*, float*,
                                           Conv2dAlgo);
template void conv2d_forward_kernel<double>(const Conv2dGeometry&, const double*, const double*, const double*,
                                            double*, Conv2dAlgo);
template void conv2d_backward_input_kernel<float>(const Conv2dGeometry&, const float*, const float*, float*,
                                                  Conv2dAlgo);
template void conv2d_backward_input_kernel<double>(const Conv2dGeometry&, const double*, const double*, double*,
                                                   Conv2dAlgo);
template void conv2d_backward_weight_kernel<float>(const Conv2dGeometry&, const float*, const float*, float*,
                                                   float*, Conv2dAlgo);
template void conv2d_backward_weight_kernel<double>(const Conv2dGeometry&, const double*, const double*, double*,
                                                    double*, Conv2dAlgo);

}  // namespace minidl
