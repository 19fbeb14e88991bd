// conv3d with a 3x3, stride-1 plane kernel by Winograd in the plane, summed
// over depth taps in the transformed domain (ops/cpu/conv3d_winograd.h).
//
// conv3d's general path (ops/cpu/conv3d.cpp) stacks the kD input slices an
// output depth reads as the channels of one 2-D image and lets conv2d run
// Winograd on it: every input plane is then transformed once per output
// depth that reads it (kD times at depth stride 1). Here each input plane is
// transformed once per work item and kept while the output depths that read
// it pass: with V^id the transformed plane id (ops/cpu/conv2d_winograd.cpp's
// notation) and U^kd the transformed kernels of depth tap kd,
//     M_xi[k][tile] of output depth od = sum_kd sum_c U^kd_xi[k][c] V^id_xi[c][tile],
//     id = od * stride_d - pad_d + kd * dilation_d,
// one accumulating GEMM per valid tap, then y = A^T M A + bias. A work item
// is (image, chunk of a plane's tiles, range of output depths); its kD most
// recent transformed planes live in a ring (scratch of the thread), so an
// input plane is transformed once per item that reads it.
//
// Zen 4, 2 threads, UNet3d's eleven 3x3x3 convs (batch 2, padding 1, float32),
// stacked -> here: forward 81.9 -> 47.3 ms, grad input 75.5 -> 47.0 ms in all
// (32->16 on 32x64x64 forward 31.1 -> 17.0; bench/RESULTS.md, 2026-11-28).
#include "minidl/ops/cpu/conv3d_winograd.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "minidl/core/check.h"
#include "minidl/ops/cpu/conv2d_gemm.h"
#include "minidl/ops/cpu/conv2d_kernels.h"
#include "minidl/ops/cpu/conv2d_winograd_tiles.h"

namespace minidl {

namespace {

using conv2d_gemm::ceil_div;
using conv2d_gemm::kMR;
using conv2d_gemm::kNR;
using conv2d_gemm::round_up;
using conv2d_gemm::Slot;
using conv2d_gemm::thread_buffer;
using conv2d_simd::kLanes;
using winograd::kSlack;
using winograd::plane_stride;
using winograd::row_scratch_size;
using winograd::TileGrid;

std::atomic<int64_t> calls{0};

int64_t input_depth(const Conv3dGeometry& g, int64_t od, int64_t kd) {
  return od * g.stride_d - g.pad_d + kd * g.dilation_d;
}

// y = correlation of x with weight(k, c, kd, a, b) (T) over depth taps and
// the 3x3 plane kernel, + bias; g.groups == 1.
template <class F, class E, class Weight>
bool correlate3d(const Conv3dGeometry& g, const E* x, Weight weight, const E* bias, E* y) {
  using T = acc_type_t<E>;
  constexpr int64_t NR = kNR<T>, kPositions = F::kPositions, S = F::kTile;
  const int64_t C = g.hw.in_channels, K = g.hw.out_channels, kD = g.kernel_d, N = g.hw.batch;
  const int64_t HW = g.hw.in_h * g.hw.in_w, OHW = g.hw.out_h * g.hw.out_w, m_pad = round_up(K, kMR);
  Conv2dGeometry plane = g.hw;
  plane.batch = 1;
  const TileGrid grid(plane, S);
  if (grid.total == 0 || K == 0 || g.out_d == 0 || N == 0) return true;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  std::atomic<bool> finite{true};  // false: x holds an inf or NaN (see conv3d_winograd.h)

  // U per depth tap, packed as conv2d_winograd.cpp packs it: block (xi, k0)
  // of tap kd at kd * u_size + (xi * C + k0) * m_pad, row tile i at + i * kc * kMR.
  const int64_t u_size = kPositions * C * m_pad;
  T* packed_u = thread_buffer<T>(Slot::kWeights, kD * u_size);
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads)
  for (int64_t kd = 0; kd < kD; ++kd)
    for (int64_t tile = 0; tile < m_pad / kMR; ++tile) {
      for (int64_t c = 0; c < C; ++c)
        winograd::pack_kernel_channel<F>(
            [&](int64_t r, int64_t a, int64_t b) { return weight(tile * kMR + r, c, kd, a, b); },
            std::min(kMR, K - tile * kMR), c, C, tile, m_pad, packed_u + kd * u_size);
    }

  // Tiles per chunk: about kChunkValues values of the ring (kD planes of C
  // rows) and M (K rows); depth ranges so that there are two items per thread.
  const int64_t cols = winograd::chunking(grid.total, kPositions, C * kD, K, NR, kLanes<T>, 1).first;
  const int64_t tile_chunks = ceil_div(grid.total, cols);
  const int64_t ranges = std::clamp<int64_t>(ceil_div(2 * threads, N * tile_chunks), 1, g.out_d);
  const int64_t per_range = ceil_div(g.out_d, ranges);
  const int64_t cols_pad = round_up(cols, NR);
  const int64_t v_stride = plane_stride<T>(C * cols_pad), m_stride = plane_stride<T>(K * cols);
  const int64_t items = N * tile_chunks * ranges;

  auto item = [&](int64_t i) {
    const int64_t n = i / (tile_chunks * ranges), tc = i / ranges % tile_chunks, r = i % ranges;
    const int64_t t0 = tc * cols, count = std::min(cols, grid.total - t0);
    const int64_t od0 = r * per_range, od1 = std::min(g.out_d, od0 + per_range);
    T* ring = thread_buffer<T>(Slot::kOperandB, kD * kPositions * v_stride);  // [slot][xi][K block][panel][kc][NR]
    T* m = thread_buffer<T>(Slot::kProduct, kPositions * m_stride);
    std::vector<int64_t> held(static_cast<size_t>(kD), -1);  // the input depth in each ring slot
    // V^id into a slot that the output depth od does not read from.
    auto transformed = [&](int64_t id, int64_t od) -> const T* {
      for (int64_t s = 0; s < kD; ++s)
        if (held[static_cast<size_t>(s)] == id) return ring + s * kPositions * v_stride;
      int64_t slot = 0;
      for (int64_t s = 0; s < kD; ++s) {
        const int64_t h = held[static_cast<size_t>(s)];
        bool needed = false;
        for (int64_t kd = 0; kd < kD; ++kd) needed = needed || (h >= 0 && h == input_depth(g, od, kd));
        if (!needed) {
          slot = s;
          break;
        }
      }
      held[static_cast<size_t>(slot)] = id;
      T* v = ring + slot * kPositions * v_stride;
      const int64_t ld = cols + kSlack<T>;
      T* vt = thread_buffer<T>(Slot::kTransform, kPositions * ld);
      T* rows = thread_buffer<T>(Slot::kRows, row_scratch_size(grid, kLanes<T>));
      for (int64_t c = 0; c < C; ++c)
        if (!winograd::transform_into_panels<F>(grid, x + ((n * C + c) * g.in_d + id) * HW, t0, count, c, C, cols_pad,
                                                v, v_stride, vt, ld, rows))
          finite.store(false, std::memory_order_relaxed);
      return v;
    };
    for (int64_t od = od0; od < od1 && finite.load(std::memory_order_relaxed); ++od) {
      bool written = false;
      for (int64_t kd = 0; kd < kD; ++kd) {
        const int64_t id = input_depth(g, od, kd);
        if (id < 0 || id >= g.in_d) continue;
        const T* v = transformed(id, od);
        winograd::position_gemms<F>(packed_u + kd * u_size, C, K, m_pad, v, v_stride, cols_pad, m, m_stride, cols, count,
                                    written, false);
        written = true;
      }
      if (!written || C == 0) std::fill_n(m, kPositions * m_stride, T(0));  // only padding depths: y = bias
      T* o = thread_buffer<T>(Slot::kTransform, S * S * (count + kSlack<T>));
      for (int64_t k = 0; k < K; ++k)
        winograd::output_transform_tiles<F>(grid, m + k * cols, m_stride, bias ? convert<T>(bias[k]) : T(0), t0, count,
                                            y + ((n * K + k) * g.out_d + od) * OHW, o);
    }
  };
  if (threads > 1 && items > 1) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t i = 0; i < items; ++i) item(i);
  } else {
    for (int64_t i = 0; i < items; ++i) item(i);
  }
  return finite.load();
}

template <class E, class Weight>
bool correlate3d_tile(const Conv3dGeometry& g, const E* x, Weight weight, const E* bias, E* y, int tile) {
  ++calls;
  if (tile == 4) return correlate3d<winograd::F4>(g, x, weight, bias, y);
  return correlate3d<winograd::F2>(g, x, weight, bias, y);
}

}  // namespace

int64_t conv3d_winograd_calls() { return calls.load(); }

bool conv3d_winograd_applies(const Conv3dGeometry& g) {
  return g.hw.groups == 1 && conv2d_winograd_applies(g.hw);
}

bool conv3d_winograd_input_applies(const Conv3dGeometry& g) {
  return conv3d_winograd_applies(g) && g.stride_d == 1 && g.pad_d <= (g.kernel_d - 1) * g.dilation_d;
}

template <class E>
bool conv3d_winograd_forward(const Conv3dGeometry& g, const E* x, const E* w, const E* bias, E* y, int tile) {
  MINIDL_CHECK(conv3d_winograd_applies(g), "conv3d_winograd_forward: expected groups 1 and a 3x3 stride-1 plane kernel");
  using T = acc_type_t<E>;
  const int64_t C = g.hw.in_channels, kD = g.kernel_d;
  return correlate3d_tile(
      g, x,
      [&](int64_t k, int64_t c, int64_t kd, int64_t a, int64_t b) {
        return convert<T>(w[(((k * C + c) * kD + kd) * 3 + a) * 3 + b]);
      },
      bias, y, tile);
}

// Grad input at depth stride 1: the forward correlation of dy, padded by
// (kD - 1) dd - pd in depth and 2 - pad in the plane, with the kernel flipped
// in all three dims and (K, C) transposed (conv2d's grad input does the same in the plane).
template <class E>
bool conv3d_winograd_backward_input(const Conv3dGeometry& g, const E* dy, const E* w, E* dx, int tile) {
  MINIDL_CHECK(conv3d_winograd_input_applies(g),
               "conv3d_winograd_backward_input: expected groups 1, depth stride 1, pad_d <= (kernel_d - 1) * "
               "dilation_d and a 3x3 stride-1 plane kernel");
  using T = acc_type_t<E>;
  Conv3dGeometry gt = g;
  gt.hw.in_channels = g.hw.out_channels, gt.hw.out_channels = g.hw.in_channels;
  gt.hw.in_h = g.hw.out_h, gt.hw.in_w = g.hw.out_w, gt.hw.out_h = g.hw.in_h, gt.hw.out_w = g.hw.in_w;
  gt.hw.pad_h = 2 - g.hw.pad_h, gt.hw.pad_w = 2 - g.hw.pad_w;
  gt.in_d = g.out_d, gt.out_d = g.in_d;
  gt.pad_d = (g.kernel_d - 1) * g.dilation_d - g.pad_d;
  const int64_t C = g.hw.in_channels, kD = g.kernel_d;
  return correlate3d_tile(
      gt, dy,
      [&](int64_t c, int64_t k, int64_t kd, int64_t a, int64_t b) {
        return convert<T>(w[(((k * C + c) * kD + (kD - 1 - kd)) * 3 + (2 - a)) * 3 + (2 - b)]);
      },
      static_cast<const E*>(nullptr), dx, tile);
}

#define MINIDL_CONV3D_WINOGRAD_INSTANTIATE(E)                                                                  \
  template bool conv3d_winograd_forward<E>(const Conv3dGeometry&, const E*, const E*, const E*, E*, int);     \
  template bool conv3d_winograd_backward_input<E>(const Conv3dGeometry&, const E*, const E*, E*, int);
MINIDL_CONV3D_WINOGRAD_INSTANTIATE(float)
MINIDL_CONV3D_WINOGRAD_INSTANTIATE(double)
MINIDL_CONV3D_WINOGRAD_INSTANTIATE(BFloat16)
MINIDL_CONV3D_WINOGRAD_INSTANTIATE(Half)
#undef MINIDL_CONV3D_WINOGRAD_INSTANTIATE

}  // namespace minidl
