// conv2d by Winograd's minimal filtering F(m x m, 3x3) (Lavin and Gray, "Fast
// Algorithms for Convolutional Neural Networks", 2015), m = 2 (kWinograd) or
// m = 4 (kWinograd4): the path for 3x3, stride-1 convolutions with enough
// channels (the rule is conv2d_pick_algo in ops/cpu/conv2d_kernels.cpp).
//
// Cut the output into m x m tiles; tile (th, tw) reads the n x n input patch
// d (n = m + 2) at rows m*th - pad ..., columns m*tw - pad ... (0 outside the
// image). For one output channel k and input channel c with the 3x3 kernel g,
//     y_tile = A^T [ (G g G^T) . (B^T d B) ] A        (. elementwise, n x n)
// and summed over c, each of the n*n positions xi is a GEMM of its own:
//     M_xi[k][tile] = sum_c U_xi[k][c] V_xi[c][tile],   U = G g G^T,  V = B^T d B
//     y_tile = A^T M A
// F(2x2): 16 products per 4 outputs where the direct sum takes 36 (2.25x
// fewer); F(4x4): 36 per 16 outputs where it takes 144 (4x fewer). The
// matrices are in ops/cpu/conv2d_winograd_transforms.h: B and A have dyadic
// entries (exact in binary), U is computed in double, so the extra error is
// that of the transforms' sums, which grows with the entries: a few ulps for
// F(2x2), more for F(4x4) (measured bound: tests/test_conv2d_winograd.cpp).
//
// The GEMMs are the packed ones of ops/cpu/conv2d_gemm.h: U is packed once per
// call as the left operand; the input transform fills the right operand's
// panels with V, whose columns are the tiles of a chunk of the batch (tiles
// of several images side by side, so small maps give long rows). The output
// transform reads M back and writes y (+ bias). The transforms run on SIMD
// vectors, a lane per tile, over runs of tiles in one tile row
// (ops/cpu/conv2d_winograd_tiles.h).
//
// Grad input with stride 1 is the forward correlation of dy, padded by
// 2 - pad, with the kernel flipped and transposed: the same code. Grad
// weight is 16 or 36 GEMMs over the tiles (winograd_weight_grad).
//
// Threads: each takes whole chunks; with fewer chunks than threads, the
// chunk's channels (transforms) and its GEMMs are split instead.
//
// 16-bit tensors (BFloat16, Half) are read and written as they are, the
// transforms and GEMMs in float32 (acc_type_t): the values are widened as the
// transforms copy them in and rounded once as the output transform writes
// them, the same bits as float32 Winograd on widened copies rounded once,
// without the copies' passes over memory.
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

using conv2d_gemm::any_tile;
using conv2d_gemm::ceil_div;
using conv2d_gemm::kMR;
using conv2d_gemm::kNR;
using conv2d_gemm::round_up;
using conv2d_gemm::Slot;
using conv2d_gemm::thread_buffer;
using conv2d_simd::kLanes;
using conv2d_simd::Vec;
using winograd::chunking;
using winograd::F2;
using winograd::F4;
using winograd::for_each_chunk;
using winograd::kSlack;
using winograd::plane_stride;
using winograd::row_scratch_size;
using winograd::TileGrid;

// ---- the correlation -------------------------------------------------------------------------

// y[n][k][i][j] = bias[k] + sum_{c,a,b} weight(gi, k, c, a, b) * x[n][c][i+a-pad][j+b-pad]
// for the geometry g (3x3, stride 1, dilation 1), where weight(gi, m, j, a, b)
// is the kernel tap (a, b) of group gi's output channel m and input channel j.
// Tensors stored as E, computed in T; weight(...) returns T.
// Returns false, leaving y partly written, when x holds an inf or NaN (see
// transform_into_panels): the caller then runs a direct path instead.
template <class F, class E, class Weight>
bool winograd_correlate(const Conv2dGeometry& g, const E* x, Weight weight, const E* bias, E* y) {
  using T = acc_type_t<E>;
  constexpr int64_t NR = kNR<T>, kPositions = F::kPositions, S = F::kTile;
  const int64_t G = g.groups, Cg = g.in_channels / G, Kg = g.out_channels / G;
  const int64_t HW = g.in_h * g.in_w, out_hw = g.out_h * g.out_w, m_pad = round_up(Kg, kMR);
  const TileGrid grid(g, S);
  if (grid.total == 0 || Kg == 0) return true;
  std::atomic<bool> finite{true};

  // U of each group, packed as the left operand of the GEMMs: block
  // (xi, k0) of size kc starts at (xi * Cg + k0) * m_pad, row tile i at + i * kc * kMR.
  const int threads = conv2d_threads(g);
  const int64_t u_size = kPositions * Cg * m_pad;
  T* packed_u = thread_buffer<T>(Slot::kWeights, G * u_size);
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads)
  for (int64_t gi = 0; gi < G; ++gi)
    for (int64_t tile = 0; tile < m_pad / kMR; ++tile) {
      for (int64_t j = 0; j < Cg; ++j)
        winograd::pack_kernel_channel<F>(
            [&](int64_t r, int64_t a, int64_t b) { return weight(gi, tile * kMR + r, j, a, b); },
            std::min(kMR, Kg - tile * kMR), j, Cg, tile, m_pad, packed_u + gi * u_size);
    }

  // Not a structured binding: clang 14 (the fuzz build) cannot capture those in lambdas.
  const std::pair<int64_t, int64_t> cols_chunks = chunking(grid.total, kPositions, Cg, Kg, NR, kLanes<T>, threads);
  const int64_t cols = cols_chunks.first, chunks = cols_chunks.second;
  // V's panels are whole (cols_pad columns, zeros past the tiles); M has cols.
  const int64_t cols_pad = round_up(cols, NR);
  const int64_t v_stride = plane_stride<T>(Cg * cols_pad), m_stride = plane_stride<T>(Kg * cols);
  struct Scratch {
    T* v;  // [xi][K block][panel][kc][NR]
    T* m;  // [xi][k][cols]
  };
  auto make_scratch = [&] {
    return Scratch{thread_buffer<T>(Slot::kOperandB, kPositions * v_stride),
                   thread_buffer<T>(Slot::kProduct, kPositions * m_stride)};
  };
  // One chunk: tiles [t0, t0 + count) of the batch (the GEMM's columns), group gi.
  auto chunk = [&](int64_t t0, int64_t count, int64_t gi, bool parallel, Scratch& s) {
    if (!finite.load(std::memory_order_relaxed)) return;  // the caller redoes the call
    T* const v = s.v;
    T* const mm = s.m;
    // Input transform, channel by channel, then into the panels.
#pragma omp parallel if (parallel)
    {
      const int64_t ld = cols + kSlack<T>;
      T* vt = thread_buffer<T>(Slot::kTransform, kPositions * ld);
      T* rows = thread_buffer<T>(Slot::kRows, row_scratch_size(grid, kLanes<T>));
#pragma omp for schedule(static)
      for (int64_t c = 0; c < Cg; ++c)
        if (!winograd::transform_into_panels<F>(grid, x + (gi * Cg + c) * HW, t0, count, c, Cg, cols_pad, v, v_stride,
                                                vt, ld, rows))
          finite.store(false, std::memory_order_relaxed);
    }
    if (!finite.load(std::memory_order_relaxed)) return;
    // The GEMMs M_xi = U_xi V_xi.
    winograd::position_gemms<F>(packed_u + gi * u_size, Cg, Kg, m_pad, v, v_stride, cols_pad, mm, m_stride, cols, count,
                                false, parallel);
    if (Cg == 0) std::fill_n(mm, kPositions * m_stride, T(0));
    // Output transform: y = A^T M A + bias.
#pragma omp parallel if (parallel)
    {
      T* o = thread_buffer<T>(Slot::kTransform, S * S * (count + kSlack<T>));
#pragma omp for schedule(static)
      for (int64_t k = 0; k < Kg; ++k)
        winograd::output_transform_tiles<F>(grid, mm + k * cols, m_stride, bias ? convert<T>(bias[gi * Kg + k]) : T(0),
                                            t0, count, y + (gi * Kg + k) * out_hw, o);
    }
  };
  for_each_chunk(grid.total, cols, chunks, G, threads, /*fixed=*/false, /*split_tiles=*/true, make_scratch, chunk);
  return finite.load();
}

// ---- grad weight -----------------------------------------------------------------------------

// dw = dL/dw for the forward correlation of g. From y_tile = A^T M A:
//     dU_xi[k][c] = sum_tiles (A dy_tile A^T)_xi[k][tile] * V_xi[c][tile],   dw[k][c] = G^T dU[k][c] G
// GEMMs (one per position) whose inner dimension is the tiles: the transformed dy packed in
// row tiles of kMR output channels ([tile][kMR]), V in panels of NR input
// channels ([tile][NR]). Each thread sums into its own dU; the final
// transform adds the threads' sums.
template <class F, class E>
void winograd_weight_grad(const Conv2dGeometry& g, const E* dy, const E* x, E* dw) {
  using T = acc_type_t<E>;
  // Panels of 2 vectors (32 floats): channel counts are multiples of 32 far
  // more often than of kNR's 48, and a cut-short panel runs at half speed.
  constexpr int kPanelVecs = 2;
  constexpr int64_t L = kLanes<T>, NR = kPanelVecs * L, kPositions = F::kPositions;
  const int64_t G = g.groups, Cg = g.in_channels / G, Kg = g.out_channels / G;
  const int64_t HW = g.in_h * g.in_w, out_hw = g.out_h * g.out_w;
  const int64_t m_pad = round_up(Kg, kMR), c_pad = round_up(Cg, NR), du_size = G * kPositions * Kg * Cg;
  const TileGrid grid(g, F::kTile);
  const int threads = conv2d_threads(g);
  // Not a structured binding: clang 14 (the fuzz build) cannot capture those in lambdas.
  const std::pair<int64_t, int64_t> cols_chunks = chunking(grid.total, kPositions, Cg, Kg, NR, L, threads);
  const int64_t cols = cols_chunks.first, chunks = cols_chunks.second;
  const int64_t a_stride = plane_stride<T>(m_pad * cols), b_stride = plane_stride<T>(c_pad * cols);

  std::vector<T*> sums(static_cast<size_t>(threads), nullptr);  // dU per thread: [gi][xi][k][c]
  // Whether thread t's dU of group gi holds sums ([t * G + gi]): its first
  // chunk writes them, the later ones add. (Zeroing every thread's dU
  // first, 38 MB each for F(4x4) at 512 -> 512, cost more than the GEMMs
  // of a 4x4 map on 2 threads.)
  std::vector<char> written(static_cast<size_t>(threads * G), 0);
  struct Scratch {
    T* du;  // this thread's dU
    int64_t thread;
  };
  auto make_scratch = [&] {
    const int thread = omp_get_thread_num();
    T* du = thread_buffer<T>(Slot::kSums, du_size);
    sums[static_cast<size_t>(thread)] = du;
    return Scratch{du, thread};
  };
  auto chunk = [&](int64_t t0, int64_t count, int64_t gi, bool parallel, Scratch& s) {
    T* a = thread_buffer<T>(Slot::kOperandA, kPositions * a_stride);  // [xi][row tile][tile][kMR]
    T* b = thread_buffer<T>(Slot::kOperandB, kPositions * b_stride);  // [xi][panel][tile][NR]
#pragma omp parallel if (parallel)
    {
      const int64_t ld = count + kSlack<T>;
      T* t = thread_buffer<T>(Slot::kTransform, kPositions * ld);
      T* rows = thread_buffer<T>(Slot::kRows, row_scratch_size(grid, kLanes<T>));
      // dy transform: A dy A^T per output channel (rows past Kg are 0).
#pragma omp for schedule(static)
      for (int64_t k = 0; k < m_pad; ++k) {
        if (k < Kg)
          winograd::output_grad_transform_tiles<F>(grid, dy + (gi * Kg + k) * out_hw, t0, count, t, ld, rows);
        T* ak = a + k / kMR * cols * kMR + k % kMR;  // + xi * a_stride + tile * kMR
        for (int64_t xi = 0; xi < kPositions; ++xi)
          for (int64_t col = 0; col < count; ++col)
            ak[xi * a_stride + col * kMR] = k < Kg ? t[xi * ld + col] : T(0);
      }
      // Input transform: V per input channel (columns past Cg are 0).
#pragma omp for schedule(static)
      for (int64_t c = 0; c < c_pad; ++c) {
        if (c < Cg) winograd::input_transform_tiles<F>(grid, x + (gi * Cg + c) * HW, t0, count, t, ld, rows);
        T* bc = b + c / NR * cols * NR + c % NR;  // + xi * b_stride + tile * NR
        for (int64_t xi = 0; xi < kPositions; ++xi)
          for (int64_t col = 0; col < count; ++col)
            bc[xi * b_stride + col * NR] = c < Cg ? t[xi * ld + col] : T(0);
      }
    }
    // dU_xi (+)= (A dy A^T)_xi V_xi^T over this chunk's tiles.
    char& done = written[static_cast<size_t>(s.thread * G + gi)];
    const bool accumulate = done;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t xi = 0; xi < kPositions; ++xi) {
      T* du = s.du + (gi * kPositions + xi) * Kg * Cg;
      for (int64_t p = 0; p < c_pad / NR; ++p)
        for (int64_t tile = 0; tile < m_pad / kMR; ++tile)
          any_tile<T, kPanelVecs>(count, a + xi * a_stride + tile * cols * kMR, b + xi * b_stride + p * cols * NR,
                                  du + tile * kMR * Cg + p * NR, Cg, std::min(kMR, Kg - tile * kMR),
                                  std::min(NR, Cg - p * NR), accumulate);
    }
    done = 1;
  };
  // Threads take chunks of tiles, each summing into its own dU (added up at
  // the end), when each gets kMinTilesPerThread tiles or more; with fewer,
  // reading every thread's dU costs more than the GEMMs it saves, and all
  // threads run each chunk together, split by positions, into one dU. Zen 4,
  // 2 threads, F(4x4), 64 images, split tiles / together: 512 -> 512 at 4x4
  // (32 tiles a thread) 22.6 / 14.7 ms, 256 -> 256 at 8x8 (128) 12.0 / 9.7,
  // 128 -> 128 at 16x16 (512) 12.3 / 15.4, 64 -> 64 at 32x32 15.8 / 18.8.
  constexpr int64_t kMinTilesPerThread = 256;
  const bool split_tiles = grid.total * G >= kMinTilesPerThread * threads;
  if (Kg > 0 && Cg > 0)
    for_each_chunk(grid.total, cols, chunks, G, threads, /*fixed=*/true, split_tiles, make_scratch, chunk);
  // dw = G^T (sum of the threads' dU) G, a vector of input channels at a
  // time (one at a time, F(4x4)'s transform took a quarter of the pass at 4x4 maps).
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads)
  for (int64_t gi = 0; gi < G; ++gi)
    for (int64_t k = 0; k < Kg; ++k)
      for (int64_t c0 = 0; c0 < Cg; c0 += L) {
        const int64_t n = std::min(L, Cg - c0);
        Vec<T> u[kPositions], gk[9];
        for (int64_t xi = 0; xi < kPositions; ++xi) u[xi] = Vec<T>{};
        for (int64_t t = 0; t < threads; ++t) {
          if (!written[static_cast<size_t>(t * G + gi)]) continue;  // a thread that got no chunk of group gi
          const T* du = sums[static_cast<size_t>(t)] + gi * kPositions * Kg * Cg + k * Cg + c0;
          for (int64_t xi = 0; xi < kPositions; ++xi) {
            alignas(64) T part[L] = {};
            std::copy_n(du + xi * Kg * Cg, n, part);
            u[xi] += conv2d_simd::load(part);
          }
        }
        F::kernel_grad_transform(u, gk);
        E* out = dw + ((gi * Kg + k) * Cg + c0) * 9;
        for (int64_t l = 0; l < n; ++l)
          for (int ab = 0; ab < 9; ++ab) out[l * 9 + ab] = convert<E>(gk[ab][l]);
      }
}

}  // namespace

bool conv2d_winograd_applies(const Conv2dGeometry& g) {
  return g.kernel_h == 3 && g.kernel_w == 3 && g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 &&
         g.dilation_w == 1 && g.pad_h <= 2 && g.pad_w <= 2;
}

namespace {

void check_applies(const Conv2dGeometry& g, int tile) {
  MINIDL_CHECK(conv2d_winograd_applies(g), "conv2d: the Winograd path needs a 3x3 kernel, stride 1, dilation 1 "
                                           "and padding <= 2");
  MINIDL_CHECK(tile == 2 || tile == 4, "conv2d: Winograd tiles are 2x2 or 4x4, got ", tile);
}

template <class E, class Weight>
bool correlate(const Conv2dGeometry& g, const E* x, Weight weight, const E* bias, E* y, int tile) {
  if (tile == 4) return winograd_correlate<F4>(g, x, weight, bias, y);
  return winograd_correlate<F2>(g, x, weight, bias, y);
}

}  // namespace

template <class T>
bool conv2d_winograd_forward(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y, int tile) {
  check_applies(g, tile);
  const int64_t Cg = g.in_channels / g.groups, Kg = g.out_channels / g.groups;
  return correlate(
      g, x,
      [&](int64_t gi, int64_t m, int64_t j, int64_t a, int64_t b) {
        return convert<acc_type_t<T>>(w[(((gi * Kg + m) * Cg + j) * 3 + a) * 3 + b]);
      },
      bias, y, tile);
}

template <class T>
bool conv2d_winograd_backward_input(const Conv2dGeometry& g, const T* dy, const T* w, T* dx, int tile) {
  check_applies(g, tile);
  // dx = dy (padded by 2 - pad) correlated with w flipped and transposed.
  Conv2dGeometry gt = g;
  gt.in_channels = g.out_channels, gt.in_h = g.out_h, gt.in_w = g.out_w, gt.out_channels = g.in_channels;
  gt.pad_h = 2 - g.pad_h, gt.pad_w = 2 - g.pad_w;
  conv2d_set_output_size(gt);  // = in_h x in_w
  const int64_t Cg = g.in_channels / g.groups, Kg = g.out_channels / g.groups;
  return correlate(
      gt, dy,
      [&](int64_t gi, int64_t m, int64_t j, int64_t a, int64_t b) {
        return convert<acc_type_t<T>>(w[(((gi * Kg + j) * Cg + m) * 3 + (2 - a)) * 3 + (2 - b)]);
      },
      static_cast<const T*>(nullptr), dx, tile);
}

template <class T>
void conv2d_winograd_backward_weight(const Conv2dGeometry& g, const T* dy, const T* x, T* dw, int tile) {
  check_applies(g, tile);
  if (tile == 4) return winograd_weight_grad<F4>(g, dy, x, dw);
  winograd_weight_grad<F2>(g, dy, x, dw);
}

#define MINIDL_WINOGRAD_INSTANTIATE(T)                                                                           \
  template bool conv2d_winograd_forward<T>(const Conv2dGeometry&, const T*, const T*, const T*, T*, int);         \
  template bool conv2d_winograd_backward_input<T>(const Conv2dGeometry&, const T*, const T*, T*, int);            \
  template void conv2d_winograd_backward_weight<T>(const Conv2dGeometry&, const T*, const T*, T*, int);
MINIDL_WINOGRAD_INSTANTIATE(float)
MINIDL_WINOGRAD_INSTANTIATE(double)
MINIDL_WINOGRAD_INSTANTIATE(BFloat16)
MINIDL_WINOGRAD_INSTANTIATE(Half)
#undef MINIDL_WINOGRAD_INSTANTIATE

}  // namespace minidl
