// conv2d's weight gradient on the im2col path (ops/cpu/conv2d_im2col.cpp has
// the forward and grad input, ops/cpu/conv2d_chunk_plan.h the columns): per
// group and tap t, dW_t = dY * X_t^T summed over every output pixel j of the
// batch, computed transposed, dW_t^T[c][m] = sum_j X_t[c][j] dY[m][j], as the
// packed GEMM of ops/cpu/conv2d_gemm.h with K running over a chunk's columns:
// the left operand X_t in tiles of kMR input channels, the right one dY^T in
// panels of NR output channels. The chunks' products are summed into dwt
// (dW_t^T per tap), which is then written out as dw[k][c][kh][kw] (overwritten).
//
// Both operands lie in memory with the pixels (the GEMM's K) along the rows,
// and the GEMM needs the channels across: both are packed through 8x8
// transposes (ops/cpu/transpose8.h).
//   dY^T: once per chunk. 8 pixels in a row of dy are contiguous whatever
//     order the columns are in, so dy is transposed in natural pixel order
//     and each transposed column stored at its place (column_of).
//   X_t: where the taps read each input pixel about once or more (3x3
//     kernels with stride 1 or 2), 8 channels of the chunk's x are transposed
//     once, pixel-major, and each tap's column is then one copy of kMR
//     values (per tap, the 8 x 8 transposes of strided runs and the run
//     checks were 13% of 3x3 stride-2 grad weight at 32x32; the packing of
//     dY^T, column by column, another 9%). Where they do not (1x1 stride 2
//     reads a quarter of x), each tap's columns are transposed from x itself,
//     8 at a time where they are runs.
//
// Threads: every thread runs every chunk and owns some input channels of dW,
// so nothing is summed across threads and dw does not depend on their count.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "minidl/ops/cpu/conv2d_chunk_plan.h"
#include "minidl/ops/cpu/conv2d_gemm.h"
#include "minidl/ops/cpu/conv2d_kernels.h"
#include "minidl/ops/cpu/transpose8.h"

namespace minidl {

namespace {

using conv2d_gemm::any_tile;
using conv2d_gemm::ceil_div;
using conv2d_gemm::kMR;
using conv2d_gemm::Slot;
using conv2d_gemm::thread_buffer;
using conv2d_plan::ChunkPlan;
using conv2d_plan::Plans;

// K block over pixels, in panels: the block's X_t tile ([kb][kMR]) stays in
// L1 while the panels of dY^T pass.
constexpr int64_t kWeightGradPanels = 12;
// The most bytes of dY^T per chunk (Kg x its columns): every tile of input
// channels streams all of it, so it should stay in L2 (half of Zen 5's
// 1 MB). At 1024 columns, 512 output channels made 2 MB, read from L3 by
// each tile (Zen 5, 1 thread, 64 x 256 -> 512 on 8x8 maps, 1x1 stride 2:
// 1.35 -> 1.30 ms AVX-512, 2.59 -> 2.47 ms AVX2).
constexpr int64_t kDyBytes = 512 << 10;
// Input channels of x transposed together: one 8 x 8 float block across,
// a whole number of kMR-row tiles (8 with AVX-512, 4 with AVX2).
constexpr int64_t kXRows = 8;
static_assert(kXRows % kMR == 0);

// The output channels in panels of 2 or 3 vectors (the micro-tile's
// columns). With AVX-512 (kMR 8) as many of 2 as can be: 8 x 32 tiles (16
// accumulators) ran faster than 8 x 48 ones (Zen 5, 1 thread: 64 x 128 ->
// 256 at 16x16, 4 x 48 + 2 x 32 panels 10.8 ms against 8 x 32's 10.5; 256 ->
// 512 at 8x8 10.2 against 9.5). With AVX2 (kMR 4) as many of 3 as can be:
// 4 x 16 tiles have 8 accumulators, which barely cover the FMAs' latency,
// and a last panel of 1 vector (128 = 5 x 24 + 8) only 4 (64 -> 128 at
// 32x32: 4 x 24 + 2 x 16 panels 23.2 ms against 24.0). Panel q holds
// channels [m0[q], m0[q] + its width) and starts at m0[q] * ld in dY^T,
// its column j at + j * its width.
template <class T>
struct MPanels {
  std::vector<int64_t> m0, vectors;
  explicit MPanels(int64_t Kg) {
    constexpr int64_t L = conv2d_gemm::kLanes<T>;
    const int64_t V = ceil_div(Kg, L);
    int64_t threes = kMR >= 8 ? (V % 2 == 1 && V >= 3 ? 1 : 0) : V / 3;
    while (threes > 0 && (V - 3 * threes) % 2 != 0) --threes;
    for (int64_t q = 0, m = 0; m < Kg; ++q) {
      m0.push_back(m);
      vectors.push_back(q < threes ? 3 : 2);
      m += vectors.back() * L;
    }
  }
  int64_t count() const { return static_cast<int64_t>(m0.size()); }
  int64_t width(int64_t q) const { return vectors[static_cast<size_t>(q)] * conv2d_gemm::kLanes<T>; }
  int64_t end() const { return m0.back() + width(count() - 1); }  // Kg rounded up to the panels
};

// dY^T of a chunk and group as the GEMM's right operand, in the panels of
// mp: channel m of column j at dyt[m0 * ld + j * width + m - m0] (m0, width:
// m's panel's); 0 past Kg and past the chunk's columns (up to its last whole
// column panel, cols_pad). ld: the most columns of a chunk.
template <class T>
void pack_dyt(const Conv2dGeometry& g, const ChunkPlan& plan, const MPanels<T>& mp, int64_t cols_pad, const T* dyg,
              int64_t Kg, int64_t ld, T* dyt) {
  const int64_t P = g.out_h * g.out_w, cols = plan.cols;
  for (int64_t q = 0; q < mp.count(); ++q) {
    const int64_t w = mp.width(q);
    T* d = dyt + mp.m0[static_cast<size_t>(q)] * ld;
    std::fill(d + cols * w, d + cols_pad * w, T(0));
    if (const int64_t used = Kg - mp.m0[static_cast<size_t>(q)]; used < w)
      for (int64_t j = 0; j < cols; ++j) std::fill(d + j * w + used, d + j * w + w, T(0));
  }
  // Where channel m's value of column 0 goes, and the column step.
  std::vector<int64_t> base(static_cast<size_t>(Kg)), step(static_cast<size_t>(Kg));
  for (int64_t q = 0; q < mp.count(); ++q)
    for (int64_t m = mp.m0[static_cast<size_t>(q)]; m < std::min(Kg, mp.m0[static_cast<size_t>(q)] + mp.width(q)); ++m) {
      base[static_cast<size_t>(m)] = mp.m0[static_cast<size_t>(q)] * ld + m - mp.m0[static_cast<size_t>(q)];
      step[static_cast<size_t>(m)] = mp.width(q);
    }
  // Float: blocks of 8 rows (channels) by 8 pixels through registers (the
  // panels' widths are whole vectors, so 8 rows from a multiple of 8 lie in one).
  constexpr bool kBlocks = std::is_same_v<T, float> && conv2d_gemm::kLanes<T> % 8 == 0;
  const int64_t m8 = kBlocks ? Kg / 8 * 8 : 0, p8 = kBlocks ? P / 8 * 8 : 0;
  for (int64_t n = 0; n < plan.images; ++n) {
    const int64_t* col = plan.column_of.data() + n * P;
    const T* dyn = dyg + n * g.out_channels * P;
    for (int64_t m0 = 0; m0 < m8; m0 += 8) {
      T* d = dyt + base[static_cast<size_t>(m0)];
      const int64_t w = step[static_cast<size_t>(m0)];
      if constexpr (kBlocks)
        for (int64_t p0 = 0; p0 < p8; p0 += 8) {
          transpose8::F8 r[8];
          for (int k = 0; k < 8; ++k) std::memcpy(&r[k], dyn + (m0 + k) * P + p0, sizeof r[k]);
          transpose8::store_columns_at(r, [&](int k) { return d + col[p0 + k] * w; });
        }
      for (int64_t p = p8; p < P; ++p)
        for (int64_t r = 0; r < 8; ++r) d[col[p] * w + r] = dyn[(m0 + r) * P + p];
    }
    for (int64_t m = m8; m < Kg; ++m) {
      T* d = dyt + base[static_cast<size_t>(m)];
      for (int64_t p = 0; p < P; ++p) d[col[p] * step[static_cast<size_t>(m)]] = dyn[m * P + p];
    }
  }
}

// The chunk's x transposed for channels [c0, c0 + kXRows) of a group (xg:
// its first channel in the chunk's first image; rows: how many of the
// kXRows exist): xt[i][r], i = n * HW + pixel, and one more row of zeros
// (i = images * HW) that the padding taps read.
template <class T>
void transpose_x(const Conv2dGeometry& g, int64_t images, const T* xg, int64_t rows, T* xt) {
  const int64_t HW = g.in_h * g.in_w;
  for (int64_t n = 0; n < images; ++n) {
    const T* s = xg + n * g.in_channels * HW;
    T* d = xt + n * HW * kXRows;
    int64_t p = 0;
    if constexpr (std::is_same_v<T, float> && kXRows == 8)
      if (rows == 8)
        for (; p + 8 <= HW; p += 8) transpose8::block(s + p, HW, d + p * kXRows, kXRows);
    for (; p < HW; ++p)
      for (int64_t r = 0; r < kXRows; ++r) d[p * kXRows + r] = r < rows ? s[r * HW + p] : T(0);
  }
  std::fill_n(xt + images * HW * kXRows, kXRows, T(0));
}

template <class T>
void backward_weight(const Conv2dGeometry& g, const T* dy, const T* x, T* dw) {
  // Columns per panel of the plan (the unit of the K blocks and of the taps
  // skipped): as the panels of dY^T are wide (AVX-512, 64 -> 128 at 32x32:
  // 12.0 ms with 32, 12.4-12.8 with 48).
  constexpr int64_t NR = (kMR >= 8 ? 2 : 3) * conv2d_gemm::kLanes<T>;
  const int64_t G = g.groups, Cg = g.in_channels / G, Kg = g.out_channels / G, taps = g.kernel_h * g.kernel_w;
  const int64_t HW = g.in_h * g.in_w, P = g.out_h * g.out_w;
  const int64_t c_tiles = ceil_div(Cg, kMR);
  const MPanels<T> mp(std::max<int64_t>(Kg, 1));
  // dW_t^T per group and tap: dwt[gi][t][c][m], summed into over all chunks.
  T* dwt = thread_buffer<T>(Slot::kSums, G * taps * Cg * Kg);
  std::fill_n(dwt, G * taps * Cg * Kg, T(0));
  const int64_t nb = conv2d_plan::chunk_images(
      g, std::clamp<int64_t>(kDyBytes / static_cast<int64_t>(sizeof(T)) / std::max<int64_t>(Kg, 1), NR,
                             conv2d_plan::kChunkCols));
  const Plans plans(g, nb, NR);
  const int64_t max_cols = g.batch == 0 ? 0 : plans(std::min(nb, g.batch)).panels * NR;
  // x transposed once per chunk where the taps read its pixels once or more (see the top).
  const bool x_transposed = HW <= taps * P;
  // The threads' shares: units of kXRows channels (x transposed) or tiles.
  const int64_t units = x_transposed ? ceil_div(Cg, kXRows) : c_tiles, tiles_per_unit = x_transposed ? kXRows / kMR : 1;
  // dY^T of each chunk and group (pack_dyt): each thread packs all of it
  // itself, a chunk at a time, so the threads never wait for one another
  // (on a busy machine a barrier per chunk costs a scheduler tick whenever
  // the other thread is descheduled), and it is in the thread's L2 for its
  // GEMMs. Cheap next to the GEMMs with 3x3 kernels (9 taps per dY value),
  // not with 1x1 ones: there the threads pack it together, for the whole
  // batch, before the GEMMs (one barrier per call; the buffer holds about
  // all of dy). Zen 5, 2 threads, CPU time per thread, 64 x 256 -> 512 at
  // 8x8, 1x1 stride 2: 0.345 -> 0.308 ms (wall 0.75 -> 0.64); 3x3 stride 2
  // lost 1-2% that way (4.32 -> 4.40 ms at 8x8, 5.03 -> 5.10 at 32x32).
  const int threads = static_cast<int>(std::clamp<int64_t>(units, 1, conv2d_threads(g)));
  const bool shared_dyt = threads > 1 && taps == 1;
  const int64_t chunks = g.batch == 0 ? 0 : ceil_div(g.batch, nb), dyt_size = mp.end() * max_cols;
  T* dyt_all = shared_dyt ? thread_buffer<T>(Slot::kTransform, std::max<int64_t>(1, chunks * G * dyt_size)) : nullptr;
#pragma omp parallel num_threads(threads)
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    T* apack = thread_buffer<T>(Slot::kOperandA, kWeightGradPanels * NR * kMR);
    T* own_dyt = shared_dyt ? nullptr : thread_buffer<T>(Slot::kTransform, dyt_size);
    if (shared_dyt) {
#pragma omp for collapse(2) schedule(static)
      for (int64_t c = 0; c < chunks; ++c)
        for (int64_t gi = 0; gi < G; ++gi) {
          const ChunkPlan& plan = plans(std::min(nb, g.batch - c * nb));
          pack_dyt<T>(g, plan, mp, plan.panels * NR, dy + (c * nb * g.out_channels + gi * Kg) * P, Kg, max_cols,
                      dyt_all + (c * G + gi) * dyt_size);
        }
    }
    T* xt = x_transposed ? thread_buffer<T>(Slot::kRows, (std::min(nb, g.batch) * HW + 1) * kXRows) : nullptr;
    // [tap][column]: where X_t's column reads, a row of xt (x transposed) or an offset into x (-1: padding).
    std::vector<int64_t> offs(static_cast<size_t>(taps * max_cols));
    for (int64_t n0 = 0; n0 < g.batch; n0 += nb) {
      const ChunkPlan& plan = plans(std::min(nb, g.batch - n0));
      const int64_t cols_pad = plan.panels * NR;
      for (int64_t t = 0; t < taps; ++t)
        for (int64_t j = 0; j < cols_pad; ++j) {
          const int64_t a = t / g.kernel_w, b = t % g.kernel_w;
          int64_t o = plan.input_offset(g, j, a, b);
          if (x_transposed) {
            const int64_t pix = plan.input_pixel(g, j, a, b);
            o = pix < 0 ? plan.images * HW : plan.n[plan.col(j)] * HW + pix;
          }
          offs[static_cast<size_t>(t * max_cols + j)] = o;
        }
      const T* xc = x + n0 * g.in_channels * HW;
      for (int64_t gi = 0; gi < G; ++gi) {
        const T* dyt = shared_dyt ? dyt_all + (n0 / nb * G + gi) * dyt_size : own_dyt;
        if (!shared_dyt)
          pack_dyt<T>(g, plan, mp, cols_pad, dy + (n0 * g.out_channels + gi * Kg) * P, Kg, max_cols, own_dyt);
        // Unit by unit, tile by tile, so that the tile's rows of x stay in
        // L2 over the taps (tap by tap, the chunk's x came from L3 once per tap).
        for (int64_t unit = tid; unit < units; unit += nt) {
          const int64_t tile0 = unit * tiles_per_unit, tile1 = std::min(c_tiles, tile0 + tiles_per_unit);
          if (x_transposed)
            transpose_x(g, plan.images, xc + (gi * Cg + unit * kXRows) * HW, std::min(kXRows, Cg - unit * kXRows), xt);
          for (int64_t tile = tile0; tile < tile1; ++tile) {
            const int64_t rows = std::min(kMR, Cg - tile * kMR);
            const T* src = xc + (gi * Cg + tile * kMR) * HW;
            const T* xts = xt + (tile - tile0) * kMR;  // x transposed: the tile's rows of each pixel
            for (int64_t t = 0; t < taps; ++t) {
              const std::vector<int64_t>& pt = plan.panels_of_tap[static_cast<size_t>(t)];
              // K blocks: runs of consecutive panels of pt, at most kWeightGradPanels long.
              for (size_t i0 = 0; i0 < pt.size();) {
                size_t i1 = i0 + 1;
                while (i1 < pt.size() && pt[i1] == pt[i1 - 1] + 1 &&
                       static_cast<int64_t>(i1 - i0) < kWeightGradPanels)
                  ++i1;
                const int64_t j0 = pt[i0] * NR, kb = static_cast<int64_t>(i1 - i0) * NR;
                const int64_t* off = offs.data() + t * max_cols + j0;
                // X_t rows of the tile's channels, columns [j0, j0 + kb), as [k][kMR].
                if (x_transposed) {
                  for (int64_t j = 0; j < kb; ++j) std::memcpy(apack + j * kMR, xts + off[j] * kXRows, sizeof(T) * kMR);
                } else {
                  // Column j as kMR rows (0 in the padding and past the tile's rows).
                  auto column = [&](int64_t j) {
                    const int64_t o = off[j];
                    T* d = apack + j * kMR;
                    if (o < 0 || rows < kMR) {
                      for (int64_t r = 0; r < kMR; ++r) d[r] = o >= 0 && r < rows ? src[r * HW + o] : T(0);
                    } else {
                      for (int64_t r = 0; r < kMR; ++r) d[r] = src[r * HW + o];
                    }
                  };
                  int64_t j = 0;
                  // Float, whole tiles of 8 rows: 8 columns at a time through
                  // registers where they read at most two runs of step 1 or 2
                  // (the stride) inside x.
                  if constexpr (std::is_same_v<T, float> && kMR == 8) {
                    const int64_t limit = x + g.batch * g.in_channels * HW - (src + 7 * HW);  // readable from row 7
                    for (; rows == kMR && j + 8 <= kb; j += 8) {
                      const bool done =
                          g.stride_w == 1   ? transpose8::runs<1>(src, HW, off + j, limit, apack + j * kMR, kMR)
                          : g.stride_w == 2 ? transpose8::runs<2>(src, HW, off + j, limit, apack + j * kMR, kMR)
                                            : false;
                      if (!done)
                        for (int64_t k = j; k < j + 8; ++k) column(k);
                    }
                  }
                  for (; j < kb; ++j) column(j);
                }
                T* c_tile = dwt + ((gi * taps + t) * Cg + tile * kMR) * Kg;
                for (int64_t q = 0; q < mp.count(); ++q) {
                  const int64_t m0 = mp.m0[static_cast<size_t>(q)], w = mp.width(q);
                  const T* b = dyt + m0 * max_cols + j0 * w;
                  if (mp.vectors[static_cast<size_t>(q)] == 3) {
                    any_tile<T, 3>(kb, apack, b, c_tile + m0, Kg, rows, std::min(w, Kg - m0), true);
                  } else {
                    any_tile<T, 2>(kb, apack, b, c_tile + m0, Kg, rows, std::min(w, Kg - m0), true);
                  }
                }
                i0 = i1;
              }
            }
          }
        }
      }
    }
  }
  // dw[k][c][t] = dwt[group][t][c][m], in blocks of 16 output channels so
  // that both sides are read and written a cache line at a time.
  constexpr int64_t kBlock = 16;
  const int64_t m_blocks = ceil_div(Kg, kBlock);
#pragma omp parallel for collapse(2) schedule(static) num_threads(conv2d_threads(g))
  for (int64_t gi = 0; gi < G; ++gi)
    for (int64_t mb = 0; mb < m_blocks; ++mb) {
      const int64_t m0 = mb * kBlock, m1 = std::min(Kg, m0 + kBlock);
      int64_t c0 = 0;
      // 1x1 kernels, float: dw[k][c] = dwt[c][k] by 8 x 8 blocks through
      // registers (column by column, the scalar stores Cg apart were 4.7% of
      // a 1x1 stride-2 grad weight on 8x8 maps).
      if constexpr (std::is_same_v<T, float>)
        if (taps == 1 && m1 - m0 == kBlock)
          for (; c0 + 8 <= Cg; c0 += 8)
            for (int64_t m = m0; m < m1; m += 8)
              transpose8::block(dwt + (gi * Cg + c0) * Kg + m, Kg, dw + (gi * Kg + m) * Cg + c0, Cg);
      for (int64_t c = c0; c < Cg; ++c)
        for (int64_t t = 0; t < taps; ++t) {
          const T* src = dwt + ((gi * taps + t) * Cg + c) * Kg;
          for (int64_t m = m0; m < m1; ++m) dw[((gi * Kg + m) * Cg + c) * taps + t] = src[m];
        }
    }
}

}  // namespace

template <class T>
void conv2d_im2col_backward_weight(const Conv2dGeometry& g, const T* dy, const T* x, T* dw) {
  backward_weight(g, dy, x, dw);
}

template void conv2d_im2col_backward_weight<float>(const Conv2dGeometry&, const float*, const float*, float*);
template void conv2d_im2col_backward_weight<double>(const Conv2dGeometry&, const double*, const double*, double*);

}  // namespace minidl
