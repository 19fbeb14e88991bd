// conv2d by Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray, "Fast
// Algorithms for Convolutional Neural Networks", 2015): the path for 3x3,
// stride-1 convolutions with enough channels (the rule is conv2d_pick_algo in
// ops/cpu/conv2d_kernels.cpp).
//
// Cut the output into 2x2 tiles; tile (th, tw) reads the 4x4 input patch d
// at rows 2*th - pad ..., columns 2*tw - pad ... (0 outside the image). For
// one output channel k and input channel c with the 3x3 kernel g,
//     y_tile = A^T [ (G g G^T) . (B^T d B) ] A        (. elementwise, 4x4)
// and summed over c, each of the 16 positions xi of the 4x4 is a GEMM of its own:
//     M_xi[k][tile] = sum_c U_xi[k][c] V_xi[c][tile],   U = G g G^T,  V = B^T d B
//     y_tile = A^T M A
// 16 products per 4 outputs where the direct sum takes 36: 2.25x fewer. The
// transforms' entries are 0, +-1 and +-1/2, exact in binary floating point,
// so results differ from the direct sum by rounding only (a few ulps more).
//
// The GEMMs are the packed ones of ops/cpu/conv2d_gemm.h: U is packed once per
// call as the left operand; the input transform fills the right operand's
// panels with V, whose columns are the tiles of a chunk of the batch (tiles
// of several images side by side, so small maps give long rows). The output
// transform reads M back and writes y (+ bias). The transforms run on SIMD
// vectors, a lane per tile, over runs of tiles in one tile row.
//
// Grad input with stride 1 is the forward correlation of dy, padded by
// 2 - pad, with the kernel flipped and transposed: the same code. Grad
// weight is 16 GEMMs too, over the tiles (winograd_weight_grad).
//
// Threads: each takes whole chunks; with fewer chunks than threads, the
// chunk's channels (transforms) and its 16 GEMMs are split instead.
#include <omp.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "minidl/core/check.h"
#include "minidl/ops/cpu/conv2d_gemm.h"
#include "minidl/ops/cpu/conv2d_kernels.h"

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
using conv2d_simd::load;
using conv2d_simd::store;
using conv2d_simd::Vec;

constexpr int64_t kPositions = 16;  // the 4x4 transform domain
// K block over input channels: a packed panel (kKC x kNR) stays in L1/L2
// while the row tiles of U pass over it.
constexpr int64_t kKC = 256;
// Values of V and M held per chunk (per thread), about 2 MiB of floats: a
// chunk is transformed, multiplied and transformed back while in cache.
constexpr int64_t kChunkValues = int64_t{1} << 19;

// Distance between the 16 planes (xi) of V or M, for n values each: n
// rounded up to 4 KiB plus 256 bytes, so that the 16 streams that a
// transform reads or writes fall into different L1 sets (a multiple of
// 4 KiB would put all 16 into one set and thrash it).
template <class T>
int64_t plane_stride(int64_t n) {
  constexpr int64_t page = 4096 / sizeof(T), skew = 256 / sizeof(T);
  return round_up(n, page) + skew;
}

// ---- the transforms (1-D, applied to rows then columns) ------------------------------------

// B^T d for 4 values: B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
template <class T>
inline void input_1d(T d0, T d1, T d2, T d3, T* o, int64_t step) {
  o[0] = d0 - d2, o[step] = d1 + d2, o[2 * step] = d2 - d1, o[3 * step] = d1 - d3;
}
// G g for 3 values: G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1].
template <class T>
inline void kernel_1d(T g0, T g1, T g2, T* o, int64_t step) {
  const T h = T(0.5) * (g0 + g2);
  o[0] = g0, o[step] = h + T(0.5) * g1, o[2 * step] = h - T(0.5) * g1, o[3 * step] = g2;
}
// A^T m for 4 values: A^T = [1 1 1 0; 0 1 -1 -1].
template <class T>
inline void output_1d(T m0, T m1, T m2, T m3, T* o, int64_t step) {
  o[0] = m0 + m1 + m2, o[step] = m1 - m2 - m3;
}

// u (4x4, row-major) = G g G^T for a 3x3 kernel read as g(a, b).
template <class T, class Kernel>
void kernel_transform(Kernel g, T* u) {
  T t[4][3];  // G g: 4 rows of 3
  for (int b = 0; b < 3; ++b) kernel_1d(g(0, b), g(1, b), g(2, b), &t[0][b], 3);
  for (int r = 0; r < 4; ++r) kernel_1d(t[r][0], t[r][1], t[r][2], u + r * 4, 1);
}

// v (4x4) = B^T d B for a 4x4 patch d (row-major). T: a scalar or a SIMD
// vector (one patch per lane), as for the other transforms of tiles.
template <class T>
inline void input_transform(const T* d, T* v) {
  T t[16];  // B^T d
  for (int s = 0; s < 4; ++s) input_1d(d[s], d[4 + s], d[8 + s], d[12 + s], t + s, 4);
  for (int r = 0; r < 4; ++r) input_1d(t[r * 4], t[r * 4 + 1], t[r * 4 + 2], t[r * 4 + 3], v + r * 4, 1);
}

// o (2x2) = A^T m A for m (4x4).
template <class T>
inline void output_transform(const T* m, T* o) {
  T t[8];  // A^T m: 2 rows of 4
  for (int s = 0; s < 4; ++s) output_1d(m[s], m[4 + s], m[8 + s], m[12 + s], t + s, 4);
  for (int r = 0; r < 2; ++r) output_1d(t[r * 4], t[r * 4 + 1], t[r * 4 + 2], t[r * 4 + 3], o + r * 2, 1);
}

// G^T u G for u (4x4): the 3x3 kernel gradient from the gradient of U = G g G^T.
template <class T>
inline void kernel_grad_transform(const T* u, T* g) {
  auto gt_1d = [](T u0, T u1, T u2, T u3, T* o, int64_t step) {  // G^T = [1 1/2 1/2 0; 0 1/2 -1/2 0; 0 1/2 1/2 1]
    const T h = T(0.5) * (u1 + u2);
    o[0] = u0 + h, o[step] = T(0.5) * (u1 - u2), o[2 * step] = h + u3;
  };
  T t[12];  // G^T u: 3 rows of 4
  for (int s = 0; s < 4; ++s) gt_1d(u[s], u[4 + s], u[8 + s], u[12 + s], t + s, 4);
  for (int r = 0; r < 3; ++r) gt_1d(t[r * 4], t[r * 4 + 1], t[r * 4 + 2], t[r * 4 + 3], g + r * 3, 1);
}

// A d A^T for a 2x2 block d of dy: the gradient of M = the 4x4 before A^T . A.
template <class T>
inline void output_grad_transform(const T* d, T* m) {
  auto a_1d = [](T d0, T d1, T* o, int64_t step) {  // A = [1 0; 1 1; 1 -1; 0 -1]
    o[0] = d0, o[step] = d0 + d1, o[2 * step] = d0 - d1, o[3 * step] = -d1;
  };
  T t[8];  // A d: 4 rows of 2
  for (int s = 0; s < 2; ++s) a_1d(d[s], d[2 + s], t + s, 2);
  for (int r = 0; r < 4; ++r) a_1d(t[r * 2], t[r * 2 + 1], m + r * 4, 1);
}

// ---- tiles -----------------------------------------------------------------------------------

// The 2x2 output tiles of a batch, numbered image by image, row by row.
struct TileGrid {
  int64_t H, W, Ho, Wo, pad_h, pad_w;
  int64_t in_image, out_image;  // values per image of x and y (all channels)
  int64_t tiles_w, per_image, total;

  explicit TileGrid(const Conv2dGeometry& g)
      : H(g.in_h), W(g.in_w), Ho(g.out_h), Wo(g.out_w), pad_h(g.pad_h), pad_w(g.pad_w),
        in_image(g.in_channels * g.in_h * g.in_w), out_image(g.out_channels * g.out_h * g.out_w),
        tiles_w(ceil_div(g.out_w, 2)), per_image(ceil_div(g.out_h, 2) * tiles_w), total(g.batch * per_image) {}

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

// Row r of a run's patches split by column parity: even[r][m] and odd[r][m]
// are the values at columns 2 * (tw0 + m) - pad and one to the right
// (0 outside the plane), for m <= len. Tile tw0 + m then reads
// even[m], odd[m], even[m + 1], odd[m + 1] in each row: loads at
// consecutive addresses across tiles, which the transforms vectorize over.
template <class T>
void split_rows(const T* plane, int64_t rows, int64_t row0, int64_t h, int64_t w, int64_t col0, int64_t len, T* even,
                T* odd) {
  const int64_t n = len + 1;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t ih = row0 + r;
    T* e = even + r * n;
    T* o = odd + r * n;
    if (ih < 0 || ih >= h) {
      std::fill_n(e, n, T(0)), std::fill_n(o, n, T(0));
      continue;
    }
    const T* src = plane + ih * w;
    // [lo, hi): the m whose two columns both lie inside; the others check.
    const int64_t lo = std::min(n, col0 >= 0 ? 0 : (1 - col0) / 2);
    const int64_t hi = std::clamp<int64_t>(w - col0 >= 2 ? (w - col0) / 2 : 0, lo, n);
    auto checked = [&](int64_t m) {
      const int64_t iw = col0 + 2 * m;
      e[m] = iw >= 0 && iw < w ? src[iw] : T(0);
      o[m] = iw + 1 >= 0 && iw + 1 < w ? src[iw + 1] : T(0);
    };
    for (int64_t m = 0; m < lo; ++m) checked(m);
    for (int64_t m = lo; m < hi; ++m) e[m] = src[col0 + 2 * m], o[m] = src[col0 + 2 * m + 1];
    for (int64_t m = hi; m < n; ++m) checked(m);
  }
}

// The transforms below run on kLanes<T> tiles at once (SIMD vectors). A run's
// last vector may hold lanes past its end: they read scratch beyond the
// run's values and write columns past it, which the next run overwrites or
// nobody reads; buffers get kSlack values of room for that.
template <class T>
constexpr int64_t kSlack = 2 * kLanes<T>;

// Values of row scratch that the transforms need for a grid.
int64_t row_scratch_size(const TileGrid& grid, int64_t lanes) { return 8 * (grid.tiles_w + 1) + 4 * lanes; }

// out[xi * ld + col] = (B^T d B)_xi for the 4x4 patch d of every tile of
// [t0, t0 + count) in one input channel (`planes`: its plane in image 0).
// ld >= count + kSlack; `rows`: row_scratch_size values.
template <class T>
void input_transform_tiles(const TileGrid& grid, const T* planes, int64_t t0, int64_t count, T* out, int64_t ld,
                           T* rows) {
  using V = Vec<T>;
  constexpr int64_t L = kLanes<T>;
  grid.for_each_run(t0, count, [&](int64_t col, int64_t n, int64_t th, int64_t tw0, int64_t len) {
    const int64_t w1 = len + 1;
    T* even = rows;
    T* odd = rows + 4 * w1;
    split_rows(planes + n * grid.in_image, 4, 2 * th - grid.pad_h, grid.H, grid.W, 2 * tw0 - grid.pad_w, len, even,
               odd);
    T* dst = out + col;
    for (int64_t m = 0; m < len; m += L) {
      V d[16], v[16];
      for (int r = 0; r < 4; ++r) {
        d[r * 4] = load(even + r * w1 + m), d[r * 4 + 1] = load(odd + r * w1 + m);
        d[r * 4 + 2] = load(even + r * w1 + m + 1), d[r * 4 + 3] = load(odd + r * w1 + m + 1);
      }
      input_transform(d, v);
      for (int xi = 0; xi < 16; ++xi) store(dst + xi * ld + m, v[xi]);
    }
  });
}

// out[xi * ld + col] = (A d A^T)_xi for the 2x2 block d of every tile of
// [t0, t0 + count) in one output-shaped channel (0 past the map's edge).
template <class T>
void output_grad_transform_tiles(const TileGrid& grid, const T* planes, int64_t t0, int64_t count, T* out, int64_t ld,
                                 T* rows) {
  using V = Vec<T>;
  constexpr int64_t L = kLanes<T>;
  grid.for_each_run(t0, count, [&](int64_t col, int64_t n, int64_t th, int64_t tw0, int64_t len) {
    const int64_t w1 = len + 1;
    T* even = rows;
    T* odd = rows + 2 * w1;
    split_rows(planes + n * grid.out_image, 2, 2 * th, grid.Ho, grid.Wo, 2 * tw0, len, even, odd);
    T* dst = out + col;
    for (int64_t m = 0; m < len; m += L) {
      V d[4] = {load(even + m), load(odd + m), load(even + w1 + m), load(odd + w1 + m)}, v[16];
      output_grad_transform(d, v);
      for (int xi = 0; xi < 16; ++xi) store(dst + xi * ld + m, v[xi]);
    }
  });
}

// y = A^T M A + bias for every tile of [t0, t0 + count) in one output
// channel: M_xi of column col at m[xi * ld + col] (readable up to col
// rounded up to whole vectors); `y_planes`: its plane in image 0. `o` holds
// 4 * (count + kSlack) values of scratch.
template <class T>
void output_transform_tiles(const TileGrid& grid, const T* m, int64_t ld, T bias, int64_t t0, int64_t count,
                            T* y_planes, T* o) {
  using V = Vec<T>;
  constexpr int64_t L = kLanes<T>;
  const int64_t lo = count + kSlack<T>;
  for (int64_t col = 0; col < count; col += L) {
    V mm[16], r[4];
    for (int xi = 0; xi < 16; ++xi) mm[xi] = load(m + xi * ld + col);
    output_transform(mm, r);
    for (int i = 0; i < 4; ++i) store(o + i * lo + col, r[i] + bias);
  }
  grid.for_each_run(t0, count, [&](int64_t col, int64_t n, int64_t th, int64_t tw0, int64_t len) {
    T* row0 = y_planes + n * grid.out_image + 2 * th * grid.Wo + 2 * tw0;
    const bool second_row = 2 * th + 1 < grid.Ho;
    // The last tile of a row of odd width has no second column.
    const int64_t pairs = 2 * (tw0 + len) <= grid.Wo ? len : len - 1;
    const T *o0 = o + col, *o1 = o + lo + col, *o2 = o + 2 * lo + col, *o3 = o + 3 * lo + col;
    for (int64_t i = 0; i < pairs; ++i) row0[2 * i] = o0[i], row0[2 * i + 1] = o1[i];
    if (pairs < len) row0[2 * pairs] = o0[pairs];
    if (!second_row) return;
    T* row1 = row0 + grid.Wo;
    for (int64_t i = 0; i < pairs; ++i) row1[2 * i] = o2[i], row1[2 * i + 1] = o3[i];
    if (pairs < len) row1[2 * pairs] = o2[pairs];
  });
}

// Tiles per chunk: whole panels of nr, about kChunkValues values of the
// two transformed operands (a and b values per tile), and a whole number of
// chunks per thread. Returns {tiles per chunk, chunks}.
std::pair<int64_t, int64_t> chunking(int64_t total, int64_t a, int64_t b, int64_t nr, int threads) {
  int64_t cols = std::max(nr, kChunkValues / (kPositions * std::max<int64_t>(a + b, 1)) / nr * nr);
  int64_t chunks = std::max<int64_t>(threads, round_up(ceil_div(total, cols), threads));
  cols = std::min(cols, round_up(ceil_div(total, chunks), nr));
  return {cols, ceil_div(total, cols)};
}

// Runs chunk(t0, count, group, parallel) over every (chunk, group): spread
// over the threads when there are enough, else one after the other with
// `parallel` set (the chunk splits its own loops). make_scratch() gives each
// thread its scratch, passed as chunk's last argument. Chunks go to threads
// as they finish (one thread may be descheduled on a busy machine) unless
// `fixed`: then always to the same thread, so per-thread sums (the weight
// gradient's) add up in the same order on every run.
template <class Chunk, class MakeScratch>
void for_each_chunk(int64_t total, int64_t cols, int64_t chunks, int64_t groups, int threads, bool fixed,
                    MakeScratch make_scratch, Chunk chunk) {
  const int64_t work = chunks * groups;
  if (work >= threads && threads > 1) {
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

// ---- the correlation -------------------------------------------------------------------------

// y[n][k][i][j] = bias[k] + sum_{c,a,b} weight(gi, k, c, a, b) * x[n][c][i+a-pad][j+b-pad]
// for the geometry g (3x3, stride 1, dilation 1), where weight(gi, m, j, a, b)
// is the kernel tap (a, b) of group gi's output channel m and input channel j.
template <class T, class Weight>
void winograd_correlate(const Conv2dGeometry& g, const T* x, Weight weight, const T* bias, T* y) {
  constexpr int64_t NR = kNR<T>;
  const int64_t G = g.groups, Cg = g.in_channels / G, Kg = g.out_channels / G;
  const int64_t HW = g.in_h * g.in_w, out_hw = g.out_h * g.out_w, m_pad = round_up(Kg, kMR);
  const TileGrid grid(g);
  if (grid.total == 0 || Kg == 0) return;

  // U of each group, packed as the left operand of the 16 GEMMs: block
  // (xi, k0) of size kc starts at (xi * Cg + k0) * m_pad, row tile i at + i * kc * kMR.
  const int threads = conv2d_threads(g);
  const int64_t u_size = kPositions * Cg * m_pad;
  T* packed_u = thread_buffer<T>(Slot::kWeights, G * u_size);
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads)
  for (int64_t gi = 0; gi < G; ++gi)
    for (int64_t m = 0; m < m_pad; ++m) {
      T* packed = packed_u + gi * u_size;
      const int64_t tile = m / kMR, r = m % kMR;
      for (int64_t j = 0; j < Cg; ++j) {
        T u[kPositions] = {};
        if (m < Kg) kernel_transform<T>([&](int64_t a, int64_t b) { return weight(gi, m, j, a, b); }, u);
        const int64_t k0 = j / kKC * kKC, kc = std::min(kKC, Cg - k0);
        for (int64_t xi = 0; xi < kPositions; ++xi)
          packed[(xi * Cg + k0) * m_pad + tile * kc * kMR + (j - k0) * kMR + r] = u[xi];
      }
    }

  // Not a structured binding: clang 14 (the fuzz build) cannot capture those in lambdas.
  const std::pair<int64_t, int64_t> cols_chunks = chunking(grid.total, Cg, Kg, NR, threads);
  const int64_t cols = cols_chunks.first, chunks = cols_chunks.second;
  const int64_t panels = cols / NR;
  const int64_t v_stride = plane_stride<T>(Cg * cols), m_stride = plane_stride<T>(Kg * cols);
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
    T* const v = s.v;
    T* const mm = s.m;
    // Input transform, channel by channel, then into the panels.
#pragma omp parallel if (parallel)
    {
      const int64_t ld = cols + kSlack<T>;
      T* vt = thread_buffer<T>(Slot::kTransform, kPositions * ld);
      T* rows = thread_buffer<T>(Slot::kRows, row_scratch_size(grid, kLanes<T>));
#pragma omp for schedule(static)
      for (int64_t c = 0; c < Cg; ++c) {
        input_transform_tiles(grid, x + (gi * Cg + c) * HW, t0, count, vt, ld, rows);
        const int64_t k0 = c / kKC * kKC, kc = std::min(kKC, Cg - k0);
        for (int64_t xi = 0; xi < kPositions; ++xi) {
          T* dst = v + xi * v_stride + k0 * cols + (c - k0) * NR;  // + panel * kc * NR
          const T* src = vt + xi * ld;
          for (int64_t p = 0; p * NR < count; ++p) {
            const int64_t n = std::min(NR, count - p * NR);
            std::copy_n(src + p * NR, n, dst + p * kc * NR);
            std::fill(dst + p * kc * NR + n, dst + p * kc * NR + NR, T(0));  // the panel's unused columns
          }
        }
      }
    }
    // The 16 GEMMs M_xi = U_xi V_xi.
    const T* u = packed_u + gi * u_size;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t xi = 0; xi < kPositions; ++xi)
      for (int64_t k0 = 0; k0 < Cg; k0 += kKC) {
        const int64_t kc = std::min(kKC, Cg - k0);
        for (int64_t p = 0; p < panels && p * NR < count; ++p)
          for (int64_t tile = 0; tile < m_pad / kMR; ++tile)
            any_tile(kc, u + (xi * Cg + k0) * m_pad + tile * kc * kMR, v + xi * v_stride + k0 * cols + p * kc * NR,
                     mm + xi * m_stride + tile * kMR * cols + p * NR, cols, std::min(kMR, Kg - tile * kMR),
                     std::min(NR, count - p * NR), k0 > 0);
      }
    if (Cg == 0) std::fill_n(mm, kPositions * m_stride, T(0));
    // Output transform: y = A^T M A + bias.
#pragma omp parallel if (parallel)
    {
      T* o = thread_buffer<T>(Slot::kTransform, 4 * (count + kSlack<T>));
#pragma omp for schedule(static)
      for (int64_t k = 0; k < Kg; ++k)
        output_transform_tiles(grid, mm + k * cols, m_stride, bias ? bias[gi * Kg + k] : T(0), t0, count,
                               y + (gi * Kg + k) * out_hw, o);
    }
  };
  for_each_chunk(grid.total, cols, chunks, G, threads, /*fixed=*/false, make_scratch, chunk);
}

// ---- grad weight -----------------------------------------------------------------------------

// dw = dL/dw for the forward correlation of g. From y_tile = A^T M A:
//     dU_xi[k][c] = sum_tiles (A dy_tile A^T)_xi[k][tile] * V_xi[c][tile],   dw[k][c] = G^T dU[k][c] G
// 16 GEMMs whose inner dimension is the tiles: the transformed dy packed in
// row tiles of kMR output channels ([tile][kMR]), V in panels of NR input
// channels ([tile][NR]). Each thread sums into its own dU; the final
// transform adds the threads' sums.
template <class T>
void winograd_weight_grad(const Conv2dGeometry& g, const T* dy, const T* x, T* dw) {
  // Panels of 2 vectors (32 floats): channel counts are multiples of 32 far
  // more often than of kNR's 48, and a cut-short panel runs at half speed.
  constexpr int kPanelVecs = 2;
  constexpr int64_t NR = kPanelVecs * kLanes<T>;
  const int64_t G = g.groups, Cg = g.in_channels / G, Kg = g.out_channels / G;
  const int64_t HW = g.in_h * g.in_w, out_hw = g.out_h * g.out_w;
  const int64_t m_pad = round_up(Kg, kMR), c_pad = round_up(Cg, NR), du_size = G * kPositions * Kg * Cg;
  const TileGrid grid(g);
  const int threads = conv2d_threads(g);
  // Not a structured binding: clang 14 (the fuzz build) cannot capture those in lambdas.
  const std::pair<int64_t, int64_t> cols_chunks = chunking(grid.total, Cg, Kg, NR, threads);
  const int64_t cols = cols_chunks.first, chunks = cols_chunks.second;
  const int64_t a_stride = plane_stride<T>(m_pad * cols), b_stride = plane_stride<T>(c_pad * cols);

  std::vector<T*> sums(static_cast<size_t>(threads), nullptr);  // dU per thread: [gi][xi][k][c]
  struct Scratch {
    T* du;  // this thread's dU
  };
  auto make_scratch = [&] {
    T* du = thread_buffer<T>(Slot::kSums, du_size);
    std::fill_n(du, du_size, T(0));
    sums[static_cast<size_t>(omp_get_thread_num())] = du;
    return Scratch{du};
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
          output_grad_transform_tiles(grid, dy + (gi * Kg + k) * out_hw, t0, count, t, ld, rows);
        T* ak = a + k / kMR * cols * kMR + k % kMR;  // + xi * a_stride + tile * kMR
        for (int64_t xi = 0; xi < kPositions; ++xi)
          for (int64_t col = 0; col < count; ++col)
            ak[xi * a_stride + col * kMR] = k < Kg ? t[xi * ld + col] : T(0);
      }
      // Input transform: V per input channel (columns past Cg are 0).
#pragma omp for schedule(static)
      for (int64_t c = 0; c < c_pad; ++c) {
        if (c < Cg) input_transform_tiles(grid, x + (gi * Cg + c) * HW, t0, count, t, ld, rows);
        T* bc = b + c / NR * cols * NR + c % NR;  // + xi * b_stride + tile * NR
        for (int64_t xi = 0; xi < kPositions; ++xi)
          for (int64_t col = 0; col < count; ++col)
            bc[xi * b_stride + col * NR] = c < Cg ? t[xi * ld + col] : T(0);
      }
    }
    // dU_xi += (A dy A^T)_xi V_xi^T over this chunk's tiles.
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t xi = 0; xi < kPositions; ++xi) {
      T* du = s.du + (gi * kPositions + xi) * Kg * Cg;
      for (int64_t p = 0; p < c_pad / NR; ++p)
        for (int64_t tile = 0; tile < m_pad / kMR; ++tile)
          any_tile<T, kPanelVecs>(count, a + xi * a_stride + tile * cols * kMR, b + xi * b_stride + p * cols * NR,
                                  du + tile * kMR * Cg + p * NR, Cg, std::min(kMR, Kg - tile * kMR),
                                  std::min(NR, Cg - p * NR), true);
    }
  };
  if (Kg > 0 && Cg > 0) for_each_chunk(grid.total, cols, chunks, G, threads, /*fixed=*/true, make_scratch, chunk);
  // dw = G^T (sum of the threads' dU) G.
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads)
  for (int64_t gi = 0; gi < G; ++gi)
    for (int64_t k = 0; k < Kg; ++k)
      for (int64_t c = 0; c < Cg; ++c) {
        T u[kPositions] = {};
        for (const T* sum : sums) {
          if (!sum) continue;  // a thread that got no chunk
          const T* du = sum + gi * kPositions * Kg * Cg + k * Cg + c;
          for (int64_t xi = 0; xi < kPositions; ++xi) u[xi] += du[xi * Kg * Cg];
        }
        kernel_grad_transform(u, dw + ((gi * Kg + k) * Cg + c) * 9);
      }
}

}  // namespace

bool conv2d_winograd_applies(const Conv2dGeometry& g) {
  return g.kernel_h == 3 && g.kernel_w == 3 && g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 &&
         g.dilation_w == 1 && g.pad_h <= 2 && g.pad_w <= 2;
}

template <class T>
void conv2d_winograd_forward(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  MINIDL_CHECK(conv2d_winograd_applies(g), "conv2d: the Winograd path needs a 3x3 kernel, stride 1, dilation 1 "
                                           "and padding <= 2");
  const int64_t Cg = g.in_channels / g.groups, Kg = g.out_channels / g.groups;
  winograd_correlate(
      g, x,
      [&](int64_t gi, int64_t m, int64_t j, int64_t a, int64_t b) { return w[(((gi * Kg + m) * Cg + j) * 3 + a) * 3 + b]; },
      bias, y);
}

template <class T>
void conv2d_winograd_backward_input(const Conv2dGeometry& g, const T* dy, const T* w, T* dx) {
  MINIDL_CHECK(conv2d_winograd_applies(g), "conv2d: the Winograd path needs a 3x3 kernel, stride 1, dilation 1 "
                                           "and padding <= 2");
  // dx = dy (padded by 2 - pad) correlated with w flipped and transposed.
  Conv2dGeometry gt = g;
  gt.in_channels = g.out_channels, gt.in_h = g.out_h, gt.in_w = g.out_w, gt.out_channels = g.in_channels;
  gt.pad_h = 2 - g.pad_h, gt.pad_w = 2 - g.pad_w;
  conv2d_set_output_size(gt);  // = in_h x in_w
  const int64_t Cg = g.in_channels / g.groups, Kg = g.out_channels / g.groups;
  winograd_correlate(
      gt, dy,
      [&](int64_t gi, int64_t m, int64_t j, int64_t a, int64_t b) {
        return w[(((gi * Kg + j) * Cg + m) * 3 + (2 - a)) * 3 + (2 - b)];
      },
      static_cast<const T*>(nullptr), dx);
}

template <class T>
void conv2d_winograd_backward_weight(const Conv2dGeometry& g, const T* dy, const T* x, T* dw) {
  MINIDL_CHECK(conv2d_winograd_applies(g), "conv2d: the Winograd path needs a 3x3 kernel, stride 1, dilation 1 "
                                           "and padding <= 2");
  winograd_weight_grad(g, dy, x, dw);
}

template void conv2d_winograd_forward<float>(const Conv2dGeometry&, const float*, const float*, const float*, float*);
template void conv2d_winograd_forward<double>(const Conv2dGeometry&, const double*, const double*, const double*,
                                              double*);
template void conv2d_winograd_backward_input<float>(const Conv2dGeometry&, const float*, const float*, float*);
template void conv2d_winograd_backward_input<double>(const Conv2dGeometry&, const double*, const double*, double*);
template void conv2d_winograd_backward_weight<float>(const Conv2dGeometry&, const float*, const float*, float*);
template void conv2d_winograd_backward_weight<double>(const Conv2dGeometry&, const double*, const double*, double*);

}  // namespace minidl
