// conv2d as a packed GEMM over a chunk of images at once (im2col done while
// packing), skipping the kernel taps that fall into the padding: the path for
// small feature maps (the cost rule is conv2d_pick_algo in ops/cpu/conv2d_kernels.cpp).
//
// The columns of the GEMM are the output pixels j = (n, oh, ow) of a chunk of
// images, so there are many of them however small one map is (a 4x4 map
// alone gives 16). Its K dimension runs over (tap, channel). Per tap
// t = (kh, kw), with W_t[m][c] = w[m][c][kh][kw] and X_t[c][j] the input
// pixel that tap t of output pixel j reads (0 in the padding):
//     forward      Y[m][j]     = sum_t W_t * X_t
//     grad input   the forward correlation of dy with W^T's taps, reversed,
//                  phase by phase of dx where strided (ops/cpu/conv2d_im2col_input.cpp)
//     grad weight  dW_t        = X_t * dY^T   summed over the chunks
// On a small map many taps read only padding: with 3x3 taps and padding 1 on
// 4x4 maps, 31% of the products are with zeros. So the columns are ordered
// by which taps are valid for them (corner, edge and inner pixels apart, the
// images of the chunk inside each group), cut into panels of kNR columns,
// and each panel is multiplied only by the taps valid for some of its columns.
//
// The GEMM is blocked as in BLIS: the left operand packed in tiles of kMR
// rows ([k][kMR]), the right one in panels of kNR columns ([k][kNR]), K in
// blocks, and a micro-kernel keeping a kMR x kNR tile of the product in
// registers. w is packed once per call, tap-major, and shared by the threads.
// The columns of a chunk (their order, the taps each panel needs) are planned
// in ops/cpu/conv2d_chunk_plan.h. The forward packs X_t with
// ops/cpu/conv2d_pack.h: for kernels larger than 1x1, from x transposed to
// images innermost, a vector of columns (one pixel of consecutive images) at
// a time; for 1x1 ones with loads along output rows (whole rows when strided).
// Grad weight (dW_t as the GEMM X_t * dY^T over the columns) is in
// ops/cpu/conv2d_im2col_weight.cpp.
//
// Threads: the forward gives each thread whole chunks (each chunk
// writes its own images); with fewer chunks than threads, a chunk's row
// tiles are split instead.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "minidl/ops/cpu/conv2d_chunk_plan.h"
#include "minidl/ops/cpu/conv2d_gemm.h"
#include "minidl/ops/cpu/conv2d_kernels.h"
#include "minidl/ops/cpu/conv2d_pack.h"
#include "minidl/ops/cpu/conv2d_packed_forward.h"

namespace minidl {

namespace {

using conv2d_gemm::any_tile;
using conv2d_gemm::ceil_div;
using conv2d_gemm::kMR;
using conv2d_gemm::kNR;
using conv2d_gemm::round_up;
using conv2d_gemm::Slot;
using conv2d_gemm::thread_buffer;
using conv2d_plan::ChunkPlan;
using conv2d_plan::chunk_images;
using conv2d_plan::kChunkCols;
using conv2d_plan::ColumnOrder;
using conv2d_plan::Plans;
using conv2d_im2col::PackedWeights;
using conv2d_im2col::WeightView;

// K block over channels (forward, grad input): a packed panel (kKC x kNR)
// stays in L1/L2 while the row tiles pass over it.
constexpr int64_t kKC = 256;
// Rows (of w) per block of the forward: kMC x kKC of packed w stays in L2
// while the panels pass (at 512 rows, w's 512 KB per tap came from L3 once
// per panel).
constexpr int64_t kMC = 128;
// Per-thread scratch of the chunk loops (the buffers come from thread_buffer).
struct Scratch {
  std::vector<int64_t> offsets;
  std::vector<int32_t> offsets32;  // the forward's, when they fit: gathers with 32-bit indices take half the instructions
  std::vector<conv2d_pack::Group8> groups;  // the forward's: how each 8 columns are packed
  std::vector<int64_t> vsrc;                // the forward's, images innermost: where each vector comes from
  std::vector<char> runs;                   // the forward's: per image, whether its columns are consecutive
  std::vector<char> direct;                 // the forward's, images innermost: per panel of a tap, read from xt
  std::vector<int64_t> last_tap;            // the forward's: per panel, the last tap that reaches it (-1: none)
};

// Runs chunk(n0, images, parallel, scratch) over the batch: chunks spread
// over the threads (each with its own scratch) when there are enough of
// them, else one after the other, each split inside.
template <class F>
void for_each_chunk(const Conv2dGeometry& g, int64_t nb, F chunk) {
  const int64_t chunks = ceil_div(g.batch, nb);
  const int threads = conv2d_threads(g);
  if (chunks >= threads && threads > 1) {
#pragma omp parallel num_threads(threads)
    {
      Scratch scratch;
#pragma omp for schedule(dynamic, 1)
      for (int64_t c = 0; c < chunks; ++c) chunk(c * nb, std::min(nb, g.batch - c * nb), false, scratch);
    }
  } else {
    Scratch scratch;
    for (int64_t c = 0; c < chunks; ++c) chunk(c * nb, std::min(nb, g.batch - c * nb), threads > 1, scratch);
  }
}

// transpose8::block where T is float; the callers' `if constexpr` keeps other
// types away, but inside their generic lambdas clang checks the call anyway.
template <class T>
void transpose_block8(const T* s, int64_t lds, T* d, int64_t ldd) {
  if constexpr (std::is_same_v<T, float>) transpose8::block(s, lds, d, ldd);
}

}  // namespace

template <class T>
PackedWeights<T> conv2d_im2col::pack_weights(const Conv2dGeometry& g, const T* w, WeightView view) {
  const int64_t G = g.groups, Kg = g.out_channels / G, Cg = g.in_channels / G, taps = g.kernel_h * g.kernel_w;
  const bool forward = view == WeightView::kForward;
  const int64_t m = forward ? Kg : Cg, inner = forward ? Cg : Kg, m_pad = round_up(m, kMR);
  const int64_t group = m_pad * inner * taps;
  T* packed = thread_buffer<T>(Slot::kWeights, G * group);
  const int64_t tiles = m_pad / kMR;
  // Tile-major, so the tile's rows of w stay in cache; taps innermost but
  // one (w's taps of a row and channel are adjacent, so each cache line of w
  // is read once rather than once per tap), 8 rows at a time. The view is a
  // template argument and whole tiles skip the row check, so that the loops
  // carry no branches (they made the packing 10% of a 4x4-map step).
  auto pack = [&](auto view_c) {
    constexpr WeightView V = decltype(view_c)::value;
#pragma omp parallel for collapse(2) schedule(static) num_threads(conv2d_threads(g))
    for (int64_t gi = 0; gi < G; ++gi)
      for (int64_t i = 0; i < tiles; ++i) {
        const T* wg = w + gi * Kg * Cg * taps;
        const int64_t rows = std::min(kMR, m - i * kMR);
        for (int64_t k = 0; k < inner; ++k) {
          const int64_t k0 = k / kKC * kKC, kc = std::min(kKC, inner - k0);
          T* d = packed + gi * group + k0 * m_pad + i * kc * kMR + (k - k0) * kMR;
          // Channel k's taps of row i * kMR: rows kMR apart (forward) or adjacent (transposed views).
          const T* src = V == WeightView::kForward ? wg + (i * kMR * Cg + k) * taps : wg + (k * Cg + i * kMR) * taps;
          const int64_t row_step = V == WeightView::kForward ? Cg * taps : taps;
          // 1x1 kernels, forward: 8 channels of the 8 rows at a time,
          // transposed in registers (row by row, 8 loads Cg apart per
          // channel: 6% of a 1x1 stride-2 forward with 512 rows).
          if constexpr (std::is_same_v<T, float> && kMR == 8 && V == WeightView::kForward)
            if (taps == 1 && rows == kMR && k % 8 == 0 && k + 8 <= inner) {
              transpose_block8(src, row_step, d, kMR);
              k += 7;
              continue;
            }
          int64_t s = 0;
          if constexpr (std::is_same_v<T, float> && kMR == 8)
            if (rows == kMR)  // 8 taps of the 8 rows at a time, transposed in registers
              for (alignas(32) float tr[64]; s + 8 <= taps; s += 8) {
                transpose8::block(src + s, row_step, tr, 8);
                for (int64_t e = 0; e < 8; ++e) std::memcpy(d + (s + e) * inner * m_pad, tr + e * 8, sizeof tr / 8);
              }
          for (; s < taps; ++s) {
            T* ds = d + s * inner * m_pad;
            if (rows == kMR) {
              for (int64_t r = 0; r < kMR; ++r) ds[r] = src[r * row_step + s];
            } else {
              for (int64_t r = 0; r < kMR; ++r) ds[r] = r < rows ? src[r * row_step + s] : T(0);
            }
          }
        }
      }
  };
  switch (view) {
    case WeightView::kForward: pack(std::integral_constant<WeightView, WeightView::kForward>()); break;
    case WeightView::kTransposed: pack(std::integral_constant<WeightView, WeightView::kTransposed>()); break;
  }
  return {packed, group};
}

namespace {

// Whether the forward's images-innermost panels are read from xt in place
// (see forward_packed): where a vector is at least a cache line.
template <class T>
constexpr bool kDirectPanels = conv2d_gemm::kLanes<T> * sizeof(T) >= 64;

// The forward panel by panel, each panel taking all its taps in turn,
// where every panel a tap reaches reads whole vectors from xt (images
// innermost, whole panels and row tiles: the common case from 16 images and
// 32 channels, AVX-512). A panel's column block of out stays in L1/L2 over
// its taps, summed in registers (conv2d_gemm::micro_tile_taps); tap by tap,
// all of out (2 MB at 128 rows x 4096 columns) went out to L3 and back once
// per tap. Returns false, having done nothing, where some panel needs packing.
template <class T>
bool forward_taps_per_panel(const Conv2dGeometry& g, const ChunkPlan& plan, int64_t Cg, int64_t Kg, const T* xt,
                            int64_t plane, const PackedWeights<T>& packed_w, int64_t gi, T* out, bool parallel,
                            Scratch& s,
                            std::vector<char>& started) {
  constexpr int64_t NR = kNR<T>, L = conv2d_gemm::kLanes<T>, NV = NR / L;
  constexpr int64_t kUnreached = -3;  // beside conv2d_pack::kZero (-1): the tap does not reach the panel
  constexpr int64_t kMaxTaps = 64;  // arrays on the stack; larger kernels go tap by tap
  const int64_t taps = g.kernel_h * g.kernel_w, cols = plan.cols;
  if (!kDirectPanels<T> || Kg % kMR != 0 || cols % L != 0 || taps > kMaxTaps) return false;
  static_assert(NV == 3);
  // Vectors in panel p (the last may have fewer).
  auto vectors = [&](int64_t p) { return std::min(NV, (cols - p * NR) / L); };
  // Vector q of panel p at tap t: s.vsrc[(p * taps + t) * NV + q], its start
  // in a channel's plane of xt.
  s.vsrc.assign(static_cast<size_t>(plan.panels * taps * NV), kUnreached);
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t p : plan.panels_of_tap[static_cast<size_t>(t)])
      for (int64_t q = 0; q < vectors(p); ++q) {
        const int64_t j = p * NR + q * L, pix = plan.input_pixel(g, j, t / g.kernel_w, t % g.kernel_w);
        if (!plan.one_pixel(j, L)) return false;
        s.vsrc[static_cast<size_t>((p * taps + t) * NV + q)] =
            pix < 0 ? conv2d_pack::kZero : pix * plan.images + plan.n[plan.col(j)];
      }
  alignas(64) static const T zeros[L] = {};
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t p = 0; p < plan.panels; ++p) {
    const int64_t nv = vectors(p);
    bool started_p = false;
    for (int64_t k0 = 0; k0 < Cg; k0 += kKC) {
      const int64_t kc = std::min(kKC, Cg - k0);
      // The taps that reach panel p: their rows of w and their vectors.
      const T* a[kMaxTaps];
      const T* src[kMaxTaps * NV];
      int64_t step[kMaxTaps * NV], reached = 0;
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t* v = s.vsrc.data() + (p * taps + t) * NV;
        if (v[0] == kUnreached) continue;
        a[reached] = packed_w.block(gi, t, Cg, k0, Kg);  // (whole row tiles: Kg is m_pad)
        for (int64_t q = 0; q < nv; ++q) {
          src[reached * nv + q] = v[q] >= 0 ? xt + k0 * plane + v[q] : zeros;
          step[reached * nv + q] = v[q] >= 0 ? plane : 0;
        }
        ++reached;
      }
      if (reached == 0) break;
      for (int64_t tile = 0; tile < Kg / kMR; ++tile) {
        T* c = out + tile * kMR * cols + p * NR;
        if (nv == 3) conv2d_gemm::micro_tile_taps<T, 3>(reached, kc, a, src, step, c, cols, k0 > 0);
        if (nv == 2) conv2d_gemm::micro_tile_taps<T, 2>(reached, kc, a, src, step, c, cols, k0 > 0);
        if (nv == 1) conv2d_gemm::micro_tile_taps<T, 1>(reached, kc, a, src, step, c, cols, k0 > 0);
        for (int64_t r = 0; r < reached; ++r) a[r] += kc * kMR;  // the next row tile's
      }
      started_p = true;
    }
    started[static_cast<size_t>(p)] = started_p;
  }
  return true;
}

}  // namespace

template <class T>
void conv2d_im2col::forward_packed(const Conv2dGeometry& g, const T* x, const PackedWeights<T>& packed_w, const T* bias,
                                   T* y) {
  constexpr int64_t NR = kNR<T>;
  const int64_t G = g.groups, Cg = g.in_channels / G, Kg = g.out_channels / G;
  const int64_t HW = g.in_h * g.in_w, P = g.out_h * g.out_w, m_pad = round_up(Kg, kMR);
  // A vector's worth of images a chunk (up to 4x the usual columns) where the
  // kernel is larger than 1x1 and there are 32 channels or more, so that the
  // columns can go images innermost (below): 16x16 outputs took 4 images a
  // chunk and went through the column gathers. Zen 4, 2 threads, 3x3 stride 2
  // at 32x32, ms before / after: 64 -> 128 14.9 / 13.7, 32 -> 64 4.3 / 4.1;
  // with 16 channels it lost (16 -> 32: 1.64 / 1.8-2.1).
  const int64_t group_cols = conv2d_plan::kImageGroup * P;
  const bool group_chunks = g.kernel_h * g.kernel_w > 1 && Cg >= 32 && group_cols <= conv2d_plan::kMaxImageGroupCols;
  const int64_t nb = chunk_images(g, group_chunks ? std::max(kChunkCols, group_cols) : kChunkCols);
  // Images innermost (see ColumnOrder): vectors of columns copied whole
  // from a transposed x, no gathers (Zen 5, 1 thread: 3x3 stride 2 on 8x8
  // maps 1.1x, stride 1 on 4x4 and 8x8 maps 1.07-1.25x, forward and grad
  // input). Not for chunks of fewer images than a vector (they would go
  // column by column), nor for 1x1 kernels, which read each pixel at most
  // once (not worth transposing all of x): strided, their whole rows are
  // loaded (ops/cpu/conv2d_pack.h).
  const ColumnOrder order = g.kernel_h * g.kernel_w > 1 && std::min(nb, g.batch) >= conv2d_plan::kImageGroup
                                ? ColumnOrder::kImagesInner
                            : g.stride_w > 1 ? ColumnOrder::kWholeRows
                                             : ColumnOrder::kPixelClasses;
  const bool images_inner = order == ColumnOrder::kImagesInner;
  constexpr int64_t NV = NR / conv2d_gemm::kLanes<T>;
  const Plans plans(g, nb, NR, order);
  for_each_chunk(g, nb, [&](int64_t n0, int64_t images, bool parallel, Scratch& s) {
    const ChunkPlan& plan = plans(images);
    const int64_t cols = plan.cols;
    T* out = thread_buffer<T>(Slot::kProduct, Kg * cols);
    T* bpack = thread_buffer<T>(Slot::kOperandB, std::min(kKC, std::max<int64_t>(Cg, 1)) * plan.panels * NR);
    // x of the chunk and group, images innermost: [c][pixel][image], the
    // channel planes a cache line apart more than their size, so that the
    // GEMM's reads of one vector across the channels do not all fall into
    // one L1 set (a plane of 8x8 pixels of 32 images is 8 KB).
    const int64_t plane = HW * images + 64 / static_cast<int64_t>(sizeof(T));
    T* xt = images_inner ? thread_buffer<T>(Slot::kTransform, Cg * plane) : nullptr;
    s.offsets.resize(static_cast<size_t>(plan.panels * NR));
    s.groups.resize(static_cast<size_t>(ceil_div(plan.panels * NR, 8)));
    s.vsrc.resize(static_cast<size_t>(plan.panels * NV));
    s.direct.assign(static_cast<size_t>(plan.panels), 0);
    std::vector<char> started(static_cast<size_t>(plan.panels));
    // Per image: whether its pixels are consecutive columns (whole rows
    // order), so that writing y is a copy by vectors (through column_of, it
    // was 13% of a 1x1 stride-2 forward on 8x8 maps; Zen 5, 1 thread, 1x1
    // stride 2, 64 x 128 -> 256 at 16x16: 1.52 -> 1.27 ms, 256 -> 512 at
    // 8x8: 1.39 -> 1.35).
    s.runs.assign(static_cast<size_t>(images), 0);
    for (int64_t n = 0; n < images; ++n) {
      const int64_t* col = plan.column_of.data() + n * P;
      bool run = true;
      for (int64_t q = 1; q < P && run; ++q) run = col[q] == col[0] + q;
      s.runs[static_cast<size_t>(n)] = run;
    }
    // Where every image's columns are one run of one vector (1x1 strided
    // onto 4x4 maps: whole rows), each tile of out goes to y as soon as its
    // last tap and K block are done, from L1, rather than in a pass over
    // all of out at the end (out came back from L3 there, its rows written
    // to y one cache line per image: 8% of a 1x1 stride-2 forward on 8x8
    // maps). Zen 5, CPU time, 64 x 256 -> 512 at 8x8: 1 thread 1.265 ->
    // 1.153 ms, 2 threads 0.312 -> 0.297 per thread. On 8x8 outputs (P = 64,
    // 64 x 128 -> 256 at 16x16) it lost: 1.22 -> 1.25 ms, 2 threads 0.65 ->
    // 0.73 wall.
    constexpr int64_t L = conv2d_gemm::kLanes<T>;
    bool early = P == L;
    for (int64_t n = 0; n < images && early; ++n)
      early = s.runs[static_cast<size_t>(n)] && plan.column_of[static_cast<size_t>(n * P)] % L == 0;
    s.last_tap.assign(static_cast<size_t>(plan.panels), -1);
    for (int64_t t = 0; t < g.kernel_h * g.kernel_w; ++t)
      for (int64_t p : plan.panels_of_tap[static_cast<size_t>(t)]) s.last_tap[static_cast<size_t>(p)] = t;
    const bool small = images * g.in_channels * HW < (int64_t{1} << 31);
    for (int64_t gi = 0; gi < G; ++gi) {
      T* yg = y + (n0 * g.out_channels + gi * Kg) * P;
      // y = out + bias for row tile `tile` of panel p (early only).
      auto flush = [&](int64_t tile, int64_t p) {
        for (int64_t m = tile * kMR; m < std::min(Kg, (tile + 1) * kMR); ++m) {
          const auto bm = conv2d_gemm::broadcast(bias ? bias[gi * Kg + m] : T(0));
          for (int64_t j = p * NR; j < std::min(cols, (p + 1) * NR); j += L)
            conv2d_gemm::store(yg + m * P + plan.output_offset(j), conv2d_gemm::load(out + m * cols + j) + bm);
        }
      };
      std::fill(started.begin(), started.end(), 0);
      const T* xg = x + (n0 * g.in_channels + gi * Cg) * HW;
      if (images_inner) conv2d_pack::images_inner(parallel, images, Cg, HW, g.in_channels * HW, xg, xt, plane);
      // (Not where tiles go to y early, tap by tap: with images innermost, only chunks of one image.)
      const bool per_panel = images_inner && !early &&
                             forward_taps_per_panel(g, plan, Cg, Kg, xt, plane, packed_w, gi, out, parallel, s,
                                                    started);
      // Else tap by tap, each over all panels:
      for (int64_t a = 0; a < g.kernel_h && !per_panel; ++a)
        for (int64_t b = 0; b < g.kernel_w; ++b) {
          const int64_t t = a * g.kernel_w + b;
          const std::vector<int64_t>& pt = plan.panels_of_tap[static_cast<size_t>(t)];
          const auto np = static_cast<int64_t>(pt.size());
          if (np == 0) continue;
          // Where the vectors come from (images innermost), and the offset
          // of each column's input pixel where some column needs it.
          bool by_columns = !images_inner;
          if (images_inner)
            for (int64_t i = 0; i < np; ++i) {
              // Whole panels of whole vectors (and whole row tiles) go
              // from xt to the GEMM uncopied (conv2d_gemm::micro_tile_taps),
              // where a vector is a cache line (AVX-512). Zen 5, 1 thread, CPU
              // time, 3x3 stride 2: 64 x 128 -> 256 at 16x16 9.86 -> 9.60 ms,
              // 256 -> 512 at 8x8 a wash; with AVX2 (half lines) the 8x8 one
              // lost (17.8 -> 18.8 ms), so AVX2 builds copy.
              s.direct[static_cast<size_t>(i)] = kDirectPanels<T> && (pt[static_cast<size_t>(i)] + 1) * NR <= cols &&
                                                 Kg % kMR == 0;
              for (int64_t q = 0; q < NV; ++q) {
                const int64_t j = pt[static_cast<size_t>(i)] * NR + q * (NR / NV);
                const int64_t pix = plan.input_pixel(g, j, a, b);
                const bool whole = plan.one_pixel(j, NR / NV);
                by_columns = by_columns || !whole;
                s.vsrc[static_cast<size_t>(i * NV + q)] = !whole    ? conv2d_pack::kColumns
                                                          : pix < 0 ? conv2d_pack::kZero
                                                                    : pix * images + plan.n[plan.col(j)];
                if (!whole) s.direct[static_cast<size_t>(i)] = 0;
              }
            }
          if (by_columns) {
            for (int64_t i = 0; i < np; ++i)
              for (int64_t jj = 0; jj < NR; ++jj)
                s.offsets[static_cast<size_t>(i * NR + jj)] =
                    plan.input_offset(g, pt[static_cast<size_t>(i)] * NR + jj, a, b);
            if (small) s.offsets32.assign(s.offsets.begin(), s.offsets.begin() + np * NR);
          }
          for (int64_t k0 = 0; k0 < Cg; k0 += kKC) {
            const int64_t kc = std::min(kKC, Cg - k0);
            // X_t for channels [k0, k0 + kc) and the panels of pt.
            if (images_inner) {
              const T* xtk = xt + k0 * plane;
              if (small) {
                conv2d_pack::pack_vectors(parallel, np, kc, xtk, plane, s.vsrc.data(), xg + k0 * HW, HW,
                                          s.offsets32.data(), s.direct.data(), bpack);
              } else {
                conv2d_pack::pack_vectors(parallel, np, kc, xtk, plane, s.vsrc.data(), xg + k0 * HW, HW,
                                          s.offsets.data(), s.direct.data(), bpack);
              }
            } else {
              // Loads of 8 from an offset must end before x does, for the last channel packed.
              const int64_t limit = ((g.batch - n0) * g.in_channels - (gi * Cg + k0 + kc - 1)) * HW;
              const conv2d_pack::Group8* groups = nullptr;
              if constexpr (conv2d_pack::kLoads<T>) {
                conv2d_pack::classify(s.offsets.data(), np * NR, g.stride_w, limit, s.groups.data());
                groups = s.groups.data();
              }
              if (small) {
                conv2d_pack::pack_panels(parallel, np, kc, xg + k0 * HW, HW, s.offsets32.data(), groups, bpack);
              } else {
                conv2d_pack::pack_panels(parallel, np, kc, xg + k0 * HW, HW, s.offsets.data(), groups, bpack);
              }
            }
            const T* a_blk = packed_w.block(gi, t, Cg, k0, m_pad);
            // Panel-major inside blocks of kMC rows: a panel stays in L1
            // while the block's row tiles pass over it, and the block of w
            // stays in L2 while the panels pass.
            for (int64_t t0 = 0; t0 < m_pad / kMR; t0 += kMC / kMR) {
              const int64_t t1 = std::min(m_pad / kMR, t0 + kMC / kMR);
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
              for (int64_t i = 0; i < np; ++i)
                for (int64_t tile = t0; tile < t1; ++tile) {
                  const int64_t p = pt[static_cast<size_t>(i)];
                  const bool acc = started[static_cast<size_t>(p)] || k0 > 0;
                  if (images_inner && s.direct[static_cast<size_t>(i)]) {
                    alignas(64) static const T zeros[conv2d_gemm::kLanes<T>] = {};
                    const T* src[NV];
                    int64_t step[NV];
                    for (int64_t q = 0; q < NV; ++q) {
                      const int64_t v = s.vsrc[static_cast<size_t>(i * NV + q)];
                      src[q] = v >= 0 ? xt + k0 * plane + v : zeros;
                      step[q] = v >= 0 ? plane : 0;
                    }
                    const T* a_tile = a_blk + tile * kc * kMR;
                    conv2d_gemm::micro_tile_taps(1, kc, &a_tile, src, step, out + tile * kMR * cols + p * NR, cols,
                                                 acc);
                  } else {
                    any_tile(kc, a_blk + tile * kc * kMR, bpack + i * kc * NR, out + tile * kMR * cols + p * NR,
                             cols, std::min(kMR, Kg - tile * kMR), std::min(NR, cols - p * NR), acc);
                  }
                  if (early && t == s.last_tap[static_cast<size_t>(p)] && k0 + kc >= Cg) flush(tile, p);
                }
            }
          }
          if (Cg > 0)
            for (int64_t p : pt) started[static_cast<size_t>(p)] = 1;
        }
      // y = out + bias, written in y's order (out's columns read through
      // column_of): out is in cache, y mostly not. Panels that no tap
      // reaches (all padding) are 0 + bias.
      for (int64_t p = 0; p < plan.panels; ++p)
        if (!started[static_cast<size_t>(p)])
          for (int64_t m = 0; m < Kg; ++m)
            std::fill(out + m * cols + p * NR, out + m * cols + std::min(cols, (p + 1) * NR), T(0));
      if (early) {  // the started panels are in y already
        for (int64_t p = 0; p < plan.panels; ++p)
          if (!started[static_cast<size_t>(p)])
            for (int64_t tile = 0; tile * kMR < Kg; ++tile) flush(tile, p);
        continue;
      }
      if constexpr (std::is_same_v<T, float>)
        if (images_inner && conv2d_pack::images_in_eights(plan.column_of.data(), images, P)) {
          conv2d_pack::images_outer(parallel, Kg, images, P, plan.column_of.data(), out, cols,
                                    bias ? bias + gi * Kg : nullptr, yg, g.out_channels * P);
          continue;
        }
      // m outer: a row of out stays in L1 while its images are written.
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
      for (int64_t m = 0; m < Kg; ++m)
        for (int64_t n = 0; n < images; ++n) {
          const T bm = bias ? bias[gi * Kg + m] : T(0);
          T* ym = y + ((n0 + n) * g.out_channels + gi * Kg + m) * P;
          const T* om = out + m * cols;
          const int64_t* col = plan.column_of.data() + n * P;
          if (s.runs[static_cast<size_t>(n)]) {  // a plain copy, by whole vectors
            const T* on = om + col[0];
            int64_t q = 0;
            for (; q + L <= P; q += L) conv2d_gemm::store(ym + q, conv2d_gemm::load(on + q) + bm);
            for (; q < P; ++q) ym[q] = on[q] + bm;
          } else {
            for (int64_t q = 0; q < P; ++q) ym[q] = om[col[q]] + bm;
          }
        }
    }
  });
}

using conv2d_im2col::forward_packed;
using conv2d_im2col::pack_weights;

template <class T>
void conv2d_im2col_forward(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  forward_packed(g, x, pack_weights(g, w, WeightView::kForward), bias, y);
}

template conv2d_im2col::PackedWeights<float> conv2d_im2col::pack_weights(const Conv2dGeometry&, const float*,
                                                                         WeightView);
template conv2d_im2col::PackedWeights<double> conv2d_im2col::pack_weights(const Conv2dGeometry&, const double*,
                                                                          WeightView);
template void conv2d_im2col::forward_packed(const Conv2dGeometry&, const float*, const PackedWeights<float>&,
                                            const float*, float*);
template void conv2d_im2col::forward_packed(const Conv2dGeometry&, const double*, const PackedWeights<double>&,
                                            const double*, double*);
template void conv2d_im2col_forward<float>(const Conv2dGeometry&, const float*, const float*, const float*, float*);
template void conv2d_im2col_forward<double>(const Conv2dGeometry&, const double*, const double*, const double*,
                                            double*);

}  // namespace minidl
