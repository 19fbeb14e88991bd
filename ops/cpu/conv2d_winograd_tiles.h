// The tile machinery of ops/cpu/conv2d_winograd.cpp, for both tile sizes
// (the F2 and F4 of ops/cpu/conv2d_winograd_transforms.h): the grid of output
// tiles, the input and output transforms over runs of tiles (SIMD vectors, a
// lane per tile), and the chunking of the tiles over threads. Internal to ops/cpu/.
//
// Tensors may be stored in a 16-bit type S (BFloat16, Half) while the
// transforms and GEMMs compute in acc_type_t<S> (float): values are widened
// where the transforms copy them in (split_rows, the gathers) and rounded
// where the output transform writes them out, so a 16-bit conv costs no
// float32 copy of its operands and gives the same bits as one computed on
// such copies and rounded once (Float32Compute's path).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "minidl/core/dtype.h"  // acc_type_t
#include "minidl/core/half.h"
#include "minidl/ops/conv2d.h"  // Conv2dGeometry
#include "minidl/ops/cpu/conv2d_gemm.h"
#include "minidl/ops/cpu/conv2d_winograd_transforms.h"

namespace minidl::winograd {

using conv2d_gemm::ceil_div;
using conv2d_gemm::round_up;
using conv2d_simd::kLanes;
using conv2d_simd::load;
using conv2d_simd::store;
using conv2d_simd::Vec;

// Values of V and M held per chunk (per thread), about 2 MiB of floats: a
// chunk is transformed, multiplied and transformed back while in cache.
constexpr int64_t kChunkValues = int64_t{1} << 19;

// Distance between the planes (positions xi) of V or M, for n values each:
// n rounded up to 4 KiB plus 256 bytes, so that the 16 or 36 streams that a
// transform reads or writes fall into different L1 sets (a multiple of
// 4 KiB would put all into one set and thrash it).
template <class T>
int64_t plane_stride(int64_t n) {
  constexpr int64_t page = 4096 / sizeof(T), skew = 256 / sizeof(T);
  return round_up(n, page) + skew;
}

// The S x S output tiles of a batch (S = 2 or 4), numbered image by image, row by row.
struct TileGrid {
  int64_t S, H, W, Ho, Wo, pad_h, pad_w;
  int64_t in_image, out_image;  // values per image of x and y (all channels)
  int64_t tiles_w, per_image, total;

  TileGrid(const Conv2dGeometry& g, int64_t tile)
      : S(tile), H(g.in_h), W(g.in_w), Ho(g.out_h), Wo(g.out_w), pad_h(g.pad_h), pad_w(g.pad_w),
        in_image(g.in_channels * g.in_h * g.in_w), out_image(g.out_channels * g.out_h * g.out_w),
        tiles_w(ceil_div(g.out_w, tile)), per_image(ceil_div(g.out_h, tile) * tiles_w), total(g.batch * per_image) {}

  // Calls f(col, image, th, tw0, len) for the runs of tiles [t0, t0 + count)
  // that lie in one tile row: tiles (th, tw0 .. tw0 + len - 1) of the
  // image, at chunk columns col .. col + len - 1.
  template <class F>
  void for_each_run(int64_t t0, int64_t count, F f) const {
    for (int64_t col = 0; col < count;) {
      const int64_t t = t0 + col, tw0 = t % tiles_w, len = std::min(count - col, tiles_w - tw0);
      f(col, t / per_image, t % per_image / tiles_w, tw0, len);
      col += len;
    }
  }
};

// Row r of a run's patches split by column phase mod S: ph[j * rows * n +
// r * n + m] is the value at column col0 + S * m + j (0 outside the plane),
// for m < n = len + 1. Tile tw0 + m then reads phases 0 .. S-1 at m and
// phases 0, 1 at m + 1 in each row: loads at consecutive addresses across
// tiles, which the transforms vectorize over.
template <class T, class Src>
void split_rows(const Src* plane, int64_t rows, int64_t row0, int64_t h, int64_t w, int64_t col0, int64_t len,
                int64_t S, T* ph) {
  const int64_t n = len + 1, phase = rows * n;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t ih = row0 + r;
    T* dst = ph + r * n;
    if (ih < 0 || ih >= h) {
      for (int64_t j = 0; j < S; ++j) std::fill_n(dst + j * phase, n, T(0));
      continue;
    }
    const Src* src = plane + ih * w;
    // [lo, hi): the m whose S columns all lie inside; the others check.
    const int64_t lo = std::min(n, col0 >= 0 ? 0 : (S - 1 - col0) / S);
    const int64_t hi = std::clamp<int64_t>(w - col0 >= S ? (w - col0) / S : 0, lo, n);
    auto checked = [&](int64_t m) {
      for (int64_t j = 0; j < S; ++j) {
        const int64_t iw = col0 + S * m + j;
        dst[j * phase + m] = iw >= 0 && iw < w ? convert<T>(src[iw]) : T(0);
      }
    };
    for (int64_t m = 0; m < lo; ++m) checked(m);
    if (S == 2) {
      for (int64_t m = lo; m < hi; ++m)
        dst[m] = convert<T>(src[col0 + 2 * m]), dst[phase + m] = convert<T>(src[col0 + 2 * m + 1]);
    } else {
      for (int64_t m = lo; m < hi; ++m)
        for (int64_t j = 0; j < S; ++j) dst[j * phase + m] = convert<T>(src[col0 + S * m + j]);
    }
    for (int64_t m = hi; m < n; ++m) checked(m);
  }
}

// The transforms below run on kLanes<T> tiles at once (SIMD vectors). A run's
// last vector may hold lanes past its end: they read scratch beyond the
// run's values and write columns past it, which the next run overwrites or
// nobody reads; buffers get kSlack values of room for that.
template <class T>
constexpr int64_t kSlack = 2 * kLanes<T>;

// Tile rows shorter than this take input_transform_gathered. Zen 5, AVX-512,
// 1 thread, CPU time of the forward (64 images, 3x3 pad 1), per-run against
// gathered: F4 512 -> 512 at 4x4 (1 tile a row) 31.8 / 26.9 against 25.5 / 25.1 ms,
// 256 -> 256 at 8x8 (2 tiles) 20.8 / 20.6 against 18.4 / 18.9, 128 -> 128 at 16x16
// (4 tiles) 18.9 / 19.1 against 18.6 / 18.8, 64 -> 64 at 32x32 (8 tiles) 21.9 / 21.6
// against 24.0 / 23.8; F2 at 4x4 (2 tiles) 29.9 / 30.2 against 29.1 / 28.7,
// at 8x8 (4 tiles) 25.5 / 25.4 against 25.9 / 25.9, at 16x16 (8 tiles) 26.9
// against 30.1: the copy costs more than the idle lanes from 4 tiles up.
constexpr int64_t kGatherBelowTiles = 4;

// Values of row scratch that the transforms need for a grid (patch rows
// times S phases, tiles_w + 1 values each).
inline int64_t row_scratch_size(const TileGrid& grid, int64_t lanes) {
  return (grid.S + 2) * grid.S * (grid.tiles_w + 1) + 4 * lanes;
}

// The input transform of input_transform_tiles for maps whose tile rows
// are shorter than a vector: each patch value is first copied to
// out[(r * P + s) * ld + col] (patch row r, column s), for every tile of the
// chunk, then transformed in place over whole vectors of tiles, whatever
// rows or images they come from. On such maps the per-run transform below
// fills few lanes (2 of 16 for F4 on 8x8 maps, 1 on 4x4: its input
// transform took 19% of a 64 x 256 -> 256 forward at 8x8).
template <class F, class T, class Src>
void input_transform_gathered(const TileGrid& grid, const Src* planes, int64_t t0, int64_t count, T* out, int64_t ld) {
  using V = Vec<T>;
  constexpr int64_t L = kLanes<T>, S = F::kTile, P = F::kPatch;
  grid.for_each_run(t0, count, [&](int64_t col, int64_t n, int64_t th, int64_t tw0, int64_t len) {
    const Src* plane = planes + n * grid.in_image;
    const int64_t row0 = S * th - grid.pad_h, col0 = S * tw0 - grid.pad_w;
    const bool inside_w = col0 >= 0 && col0 + S * (len - 1) + P <= grid.W;
    for (int64_t r = 0; r < P; ++r) {
      const int64_t ih = row0 + r;
      T* dst = out + r * P * ld + col;
      if (ih < 0 || ih >= grid.H) {
        for (int64_t s = 0; s < P; ++s) std::fill_n(dst + s * ld, len, T(0));
        continue;
      }
      const Src* src = plane + ih * grid.W + col0;
      if (inside_w) {
        for (int64_t s = 0; s < P; ++s)
          for (int64_t m = 0; m < len; ++m) dst[s * ld + m] = convert<T>(src[S * m + s]);
      } else {
        for (int64_t s = 0; s < P; ++s)
          for (int64_t m = 0; m < len; ++m) {
            const int64_t iw = col0 + S * m + s;
            dst[s * ld + m] = iw >= 0 && iw < grid.W ? convert<T>(src[S * m + s]) : T(0);
          }
      }
    }
  });
  for (int64_t col = 0; col < count; col += L) {
    V d[P * P], v[P * P];
    for (int xi = 0; xi < P * P; ++xi) d[xi] = load(out + xi * ld + col);
    input_transform<F>(d, v);
    for (int xi = 0; xi < P * P; ++xi) store(out + xi * ld + col, v[xi]);
  }
}

// out[xi * ld + col] = (B^T d B)_xi for the patch d of every tile of
// [t0, t0 + count) in one input channel (`planes`: its plane in image 0).
// ld >= count + kSlack; `rows`: row_scratch_size values.
template <class F, class T, class Src>
void input_transform_tiles(const TileGrid& grid, const Src* planes, int64_t t0, int64_t count, T* out, int64_t ld,
                           T* rows) {
  using V = Vec<T>;
  constexpr int64_t L = kLanes<T>, S = F::kTile, P = F::kPatch;
  if (grid.tiles_w < kGatherBelowTiles) return input_transform_gathered<F>(grid, planes, t0, count, out, ld);
  grid.for_each_run(t0, count, [&](int64_t col, int64_t n, int64_t th, int64_t tw0, int64_t len) {
    const int64_t w1 = len + 1, phase = P * w1;
    split_rows(planes + n * grid.in_image, P, S * th - grid.pad_h, grid.H, grid.W, S * tw0 - grid.pad_w, len, S,
               rows);
    T* dst = out + col;
    for (int64_t m = 0; m < len; m += L) {
      V d[P * P], v[P * P];
      for (int r = 0; r < P; ++r) {
        const T* row = rows + r * w1 + m;
        for (int j = 0; j < S; ++j) d[r * P + j] = load(row + j * phase);
        for (int j = S; j < P; ++j) d[r * P + j] = load(row + (j - S) * phase + 1);
      }
      input_transform<F>(d, v);
      for (int xi = 0; xi < P * P; ++xi) store(dst + xi * ld + m, v[xi]);
    }
  });
}

// out[xi * ld + col] = (A d A^T)_xi for the S x S block d of every tile of
// [t0, t0 + count) in one output-shaped channel (0 past the map's edge).
// Tile rows shorter than kGatherBelowTiles are gathered first, as in
// input_transform_gathered.
template <class F, class T, class Src>
void output_grad_transform_tiles(const TileGrid& grid, const Src* planes, int64_t t0, int64_t count, T* out, int64_t ld,
                                 T* rows) {
  using V = Vec<T>;
  constexpr int64_t L = kLanes<T>, S = F::kTile, P = F::kPatch;
  if (grid.tiles_w < kGatherBelowTiles) {
    grid.for_each_run(t0, count, [&](int64_t col, int64_t n, int64_t th, int64_t tw0, int64_t len) {
      const Src* plane = planes + n * grid.out_image;
      for (int64_t r = 0; r < S; ++r) {
        const int64_t ih = S * th + r;
        for (int64_t j = 0; j < S; ++j)
          for (int64_t m = 0; m < len; ++m) {
            const int64_t iw = S * (tw0 + m) + j;
            out[(r * S + j) * ld + col + m] =
                ih < grid.Ho && iw < grid.Wo ? convert<T>(plane[ih * grid.Wo + iw]) : T(0);
          }
      }
    });
    for (int64_t col = 0; col < count; col += L) {
      V d[S * S], v[P * P];
      for (int i = 0; i < S * S; ++i) d[i] = load(out + i * ld + col);
      output_grad_transform<F>(d, v);
      for (int xi = 0; xi < P * P; ++xi) store(out + xi * ld + col, v[xi]);
    }
    return;
  }
  grid.for_each_run(t0, count, [&](int64_t col, int64_t n, int64_t th, int64_t tw0, int64_t len) {
    const int64_t w1 = len + 1, phase = S * w1;
    split_rows(planes + n * grid.out_image, S, S * th, grid.Ho, grid.Wo, S * tw0, len, S, rows);
    T* dst = out + col;
    for (int64_t m = 0; m < len; m += L) {
      V d[S * S], v[P * P];
      for (int r = 0; r < S; ++r)
        for (int j = 0; j < S; ++j) d[r * S + j] = load(rows + j * phase + r * w1 + m);
      output_grad_transform<F>(d, v);
      for (int xi = 0; xi < P * P; ++xi) store(dst + xi * ld + m, v[xi]);
    }
  });
}

// y = A^T M A + bias for every tile of [t0, t0 + count) in one output
// channel: M_xi of column col at m[xi * ld + col] (readable up to col
// rounded up to whole vectors); `y_planes`: its plane in image 0, each
// value rounded once to Dst. `o` holds S * S * (count + kSlack) values of scratch.
template <class F, class T, class Dst>
void output_transform_tiles(const TileGrid& grid, const T* m, int64_t ld, T bias, int64_t t0, int64_t count,
                            Dst* y_planes, T* o) {
  using V = Vec<T>;
  constexpr int64_t L = kLanes<T>, S = F::kTile, P = F::kPatch;
  const int64_t lo = count + kSlack<T>;
  for (int64_t col = 0; col < count; col += L) {
    V mm[P * P], r[S * S];
    for (int xi = 0; xi < P * P; ++xi) mm[xi] = load(m + xi * ld + col);
    output_transform<F>(mm, r);
    for (int i = 0; i < S * S; ++i) store(o + i * lo + col, r[i] + bias);
  }
  grid.for_each_run(t0, count, [&](int64_t col, int64_t n, int64_t th, int64_t tw0, int64_t len) {
    Dst* row0 = y_planes + n * grid.out_image + S * th * grid.Wo + S * tw0;
    const int64_t rows = std::min(S, grid.Ho - S * th);
    // Only the last tile of a row can be cut short (by the map's edge).
    const int64_t last_cols = std::min(S, grid.Wo - S * (tw0 + len - 1));
    const int64_t full = last_cols == S ? len : len - 1;
    for (int64_t i = 0; i < rows; ++i) {
      Dst* row = row0 + i * grid.Wo;
      const T* oi = o + i * S * lo + col;
      for (int64_t q = 0; q < full; ++q)
        for (int64_t j = 0; j < S; ++j) row[S * q + j] = convert<Dst>(oi[j * lo + q]);
      if (full < len)
        for (int64_t j = 0; j < last_cols; ++j) row[S * full + j] = convert<Dst>(oi[j * lo + full]);
    }
  });
}

// ---- the GEMMs' operands (conv2d_winograd.cpp and conv3d_winograd.cpp) ----
// M_xi = U_xi V_xi for each position xi: U (output x input channels) packed
// as conv2d_gemm's left operand, V (input channels x tiles) in its right
// operand's panels of kNR columns, the input channels in blocks of kKC.

// K block over input channels: a packed panel (kKC x kNR) stays in L1/L2
// while the row tiles of U pass over it.
constexpr int64_t kKC = 256;

// U of input channel c (of C) for row tile `tile` of the output channels
// (kernel(r, a, b): tap (a, b) of its output channel r < rows), into
// `packed`: block (xi, k0) at (xi * C + k0) * m_pad, row tile at + tile * kc * kMR.
template <class F, class T, class Kernel>
void pack_kernel_channel(Kernel kernel, int64_t rows, int64_t c, int64_t C, int64_t tile, int64_t m_pad, T* packed) {
  constexpr int64_t MR = conv2d_gemm::kMR;
  T u[F::kPositions * MR];
  kernel_transform<F, MR>(kernel, rows, u);
  const int64_t k0 = c / kKC * kKC, kc = std::min(kKC, C - k0);
  for (int64_t xi = 0; xi < F::kPositions; ++xi)
    std::copy_n(u + xi * MR, MR, packed + (xi * C + k0) * m_pad + tile * kc * MR + (c - k0) * MR);
}

// dst[0, n) = src[0, n); whether every value is finite. x * 0 is NaN
// exactly when x is inf or NaN, so one multiply-add a vector tells
// (also the cheapest way measured: the check costs the F(4x4) forward 1-2%).
template <class T>
bool copy_finite(const T* src, int64_t n, T* dst) {
  using V = Vec<T>;
  constexpr int64_t L = kLanes<T>;
  V acc{};
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const V v = load(src + i);
    store(dst + i, v);
    acc += v * T(0);
  }
  T tail = 0;
  for (; i < n; ++i) {
    dst[i] = src[i];
    tail += src[i] * T(0);
  }
  for (int64_t l = 0; l < L; ++l) tail += acc[l];
  return tail == T(0);
}

// V of input channel c (of C; `plane`: its plane in image 0) for tiles [t0,
// t0 + count) into the panels at v: [xi, stride v_stride][K block][panel][kc][kNR],
// zeros in a panel's columns past count. Scratch: vt (positions x ld, ld >=
// count + kSlack) and rows (row_scratch_size). Returns whether V is finite:
// an inf or NaN input makes some of it inf or NaN, and the output transform
// would then spread NaN over the whole output tile (inf - inf), where the
// direct correlation keeps it to the outputs that read the value.
template <class F, class T, class Src>
bool transform_into_panels(const TileGrid& grid, const Src* plane, int64_t t0, int64_t count, int64_t c, int64_t C,
                           int64_t cols_pad, T* v, int64_t v_stride, T* vt, int64_t ld, T* rows) {
  constexpr int64_t NR = conv2d_gemm::kNR<T>;
  input_transform_tiles<F>(grid, plane, t0, count, vt, ld, rows);
  const int64_t k0 = c / kKC * kKC, kc = std::min(kKC, C - k0);
  bool finite = true;
  for (int64_t xi = 0; xi < F::kPositions; ++xi) {
    T* dst = v + xi * v_stride + k0 * cols_pad + (c - k0) * NR;  // + panel * kc * NR
    const T* src = vt + xi * ld;
    for (int64_t p = 0; p * NR < count; ++p) {
      const int64_t n = std::min(NR, count - p * NR);
      finite &= copy_finite(src + p * NR, n, dst + p * kc * NR);
      std::fill(dst + p * kc * NR + n, dst + p * kc * NR + NR, T(0));  // the panel's unused columns
    }
  }
  return finite;
}

// M_xi (+)= U_xi V_xi for every position, u and v as packed above (C input
// channels, K output channels, m_pad rows), M at m: [xi, stride m_stride][k][ld_m],
// its first `count` columns; `accumulate`: add to M. `parallel`: positions over the threads.
template <class F, class T>
void position_gemms(const T* u, int64_t C, int64_t K, int64_t m_pad, const T* v, int64_t v_stride, int64_t cols_pad,
                    T* m, int64_t m_stride, int64_t ld_m, int64_t count, bool accumulate, bool parallel) {
  constexpr int64_t NR = conv2d_gemm::kNR<T>, MR = conv2d_gemm::kMR;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t xi = 0; xi < F::kPositions; ++xi)
    for (int64_t k0 = 0; k0 < C; k0 += kKC) {
      const int64_t kc = std::min(kKC, C - k0);
      for (int64_t p = 0; p < cols_pad / NR && p * NR < count; ++p)
        for (int64_t tile = 0; tile < m_pad / MR; ++tile)
          conv2d_gemm::any_tile(kc, u + (xi * C + k0) * m_pad + tile * kc * MR, v + xi * v_stride + k0 * cols_pad + p * kc * NR,
                                m + xi * m_stride + tile * MR * ld_m + p * NR, ld_m, std::min(MR, K - tile * MR),
                                std::min(NR, count - p * NR), accumulate || k0 > 0);
    }
}

// Tiles per chunk: whole panels of nr, about kChunkValues values of the
// two transformed operands (a and b values per tile and position), and a
// whole number of chunks per thread. Returns {tiles per chunk, chunks}.
// Where the threads' shares are under a panel, chunks of whole vectors
// (`lanes`) instead: F(4x4) on 4x4 maps has one tile per image, and 64
// images on 2 threads made chunks of 48 and 16 tiles (2 threads 0.67x of
// 1 on 512 -> 512 where 32 and 32 give 0.5x).
inline std::pair<int64_t, int64_t> chunking(int64_t total, int64_t positions, int64_t a, int64_t b, int64_t nr,
                                            int64_t lanes, int threads) {
  int64_t cols = std::max(nr, kChunkValues / (positions * std::max<int64_t>(a + b, 1)) / nr * nr);
  int64_t chunks = std::max<int64_t>(threads, round_up(ceil_div(total, cols), threads));
  const int64_t share = ceil_div(total, chunks);
  cols = std::min(cols, round_up(share, share >= nr ? nr : lanes));
  return {cols, ceil_div(total, cols)};
}

// Runs chunk(t0, count, group, parallel) over every (chunk, group): spread
// over the threads when there are enough, else one after the other with
// `parallel` set (the chunk splits its own loops). make_scratch() gives each
// thread its scratch, passed as chunk's last argument. Chunks go to threads
// as they finish (one thread may be descheduled on a busy machine) unless
// `fixed`: then always to the same thread, so per-thread sums (the weight
// gradient's) add up in the same order on every run.
// `split_tiles` false: always the latter (every chunk on all threads).
template <class Chunk, class MakeScratch>
void for_each_chunk(int64_t total, int64_t cols, int64_t chunks, int64_t groups, int threads, bool fixed,
                    bool split_tiles, MakeScratch make_scratch, Chunk chunk) {
  const int64_t work = chunks * groups;
  if (split_tiles && work >= threads && threads > 1) {
    auto run = [&](int64_t i, auto& s) {
      const int64_t c = i / groups;
      chunk(c * cols, std::min(cols, total - c * cols), i % groups, false, s);
    };
#pragma omp parallel num_threads(threads)
    {
      auto s = make_scratch();
      if (fixed) {
#pragma omp for schedule(static, 1)
        for (int64_t i = 0; i < work; ++i) run(i, s);
      } else {
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < work; ++i) run(i, s);
      }
    }
  } else {
    auto s = make_scratch();
    for (int64_t i = 0; i < work; ++i) {
      const int64_t c = i / groups;
      chunk(c * cols, std::min(cols, total - c * cols), i % groups, threads > 1, s);
    }
  }
}

}  // namespace minidl::winograd
