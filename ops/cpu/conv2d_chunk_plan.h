// The GEMM columns of a chunk of images for the im2col conv2d path
// (ops/cpu/conv2d_im2col.cpp): which output pixel each column is, which
// kernel taps each panel of kNR columns needs (taps that read only padding
// are skipped), and where each column's input and output pixels are.
// Internal to ops/cpu/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "minidl/ops/conv2d.h"  // Conv2dGeometry
#include "minidl/ops/cpu/conv2d_gemm.h"
#include "minidl/ops/cpu/conv2d_kernels.h"  // conv2d_threads

namespace minidl::conv2d_plan {

using conv2d_gemm::ceil_div;

// The order of a chunk's columns. Output pixels are grouped by the taps they
// can use (corner, edge and inner pixels apart), so that panels need few taps:
//   kPixelClasses: per group, image after image, each image's pixels row-major;
//   kWholeRows: as one group (the union of their taps), so that every output
//     row is a run of columns (ops/cpu/conv2d_pack.h's loads need them); costs
//     the products of the padding columns' padding taps;
//   kImagesInner: per group, per block of kImageGroup images, pixel after
//     pixel, the block's images side by side: a vector of columns is one
//     pixel of consecutive images, which ops/cpu/conv2d_pack.h copies from
//     the images-innermost copy of x whole (no gathers, no shuffles), and
//     the padding taps are skipped by row and column.
enum class ColumnOrder { kPixelClasses, kWholeRows, kImagesInner };
constexpr int64_t kImageGroup = conv2d_gemm::kLanes<float>;

// Kernel offsets k (kh or kw) for which output position o reads inside the
// input: 0 <= o*stride - pad + k*dilation < in. Always a range [lo, hi).
struct Range {
  int64_t lo = 0, hi = 0;
  bool empty() const { return lo >= hi; }
  bool operator==(const Range&) const = default;
};
inline Range tap_range(int64_t o, int64_t stride, int64_t pad, int64_t dilation, int64_t in, int64_t kernel) {
  const int64_t base = o * stride - pad;
  Range r;
  r.lo = std::min(kernel, base >= 0 ? 0 : ceil_div(-base, dilation));
  r.hi = std::clamp<int64_t>(in - base <= 0 ? 0 : ceil_div(in - base, dilation), r.lo, kernel);
  return r;
}

// The output pixels of a chunk in GEMM column order, and the taps each panel needs.
struct ChunkPlan {
  int64_t images = 0, cols = 0, panels = 0;
  std::vector<int64_t> n, oh, ow;                   // per column
  std::vector<int64_t> out_off;                     // per column: see output_offset
  std::vector<int64_t> column_of;                   // [n * Ho*Wo + oh * Wo + ow] -> its column
  std::vector<std::vector<int64_t>> panels_of_tap;  // [kh * kW + kw] -> panels needing it

  ChunkPlan(const Conv2dGeometry& g, int64_t images_, int64_t nr, ColumnOrder order) : images(images_) {
    const bool whole_rows = order == ColumnOrder::kWholeRows;
    // Output rows (and columns) grouped by their valid kernel rows (columns).
    auto groups = [](int64_t count, auto range_of) {
      std::vector<std::pair<Range, std::vector<int64_t>>> gs;
      for (int64_t o = 0; o < count; ++o) {
        const Range r = range_of(o);
        auto it = std::find_if(gs.begin(), gs.end(), [&](const auto& e) { return e.first == r; });
        if (it == gs.end()) {
          gs.emplace_back(r, std::vector<int64_t>());
          it = gs.end() - 1;
        }
        it->second.push_back(o);
      }
      return gs;
    };
    const auto row_groups =
        groups(g.out_h, [&](int64_t o) { return tap_range(o, g.stride_h, g.pad_h, g.dilation_h, g.in_h, g.kernel_h); });
    auto col_range = [&](int64_t o) { return tap_range(o, g.stride_w, g.pad_w, g.dilation_w, g.in_w, g.kernel_w); };
    Range all_cols;
    for (int64_t o = 0; o < g.out_w; ++o)
      if (const Range r = col_range(o); !r.empty())
        all_cols = all_cols.empty() ? r : Range{std::min(all_cols.lo, r.lo), std::max(all_cols.hi, r.hi)};
    const auto col_groups = whole_rows ? groups(g.out_w, [&](int64_t) { return all_cols; }) : groups(g.out_w, col_range);
    // Groups in snake order (the column groups run backwards on every other
    // row group), so neighbouring groups share their kernel rows or columns
    // and a panel that straddles two needs no more taps than the larger one.
    std::vector<Range> col_kh, col_kw;
    // kImagesInner: inside each pixel group, the images in blocks of
    // kImageGroup, each block pixel after pixel with its images side by side.
    const bool inner = order == ColumnOrder::kImagesInner;
    // Groups of whole panels (columns a multiple of nr) first: then no panel
    // straddles two of them, to compute the larger one's taps for the
    // other's columns (64 images on 4x4 maps, 3x3 stride 2: 576 inner, 2 x 192
    // edge and 64 corner columns; in snake order, 2.3% of the products).
    std::vector<std::pair<size_t, size_t>> order_of_groups;
    for (int whole = 1; whole >= 0; --whole)
      for (size_t ri = 0; ri < row_groups.size(); ++ri)
        for (size_t ci = 0; ci < col_groups.size(); ++ci) {
          const size_t c = ri % 2 == 0 ? ci : col_groups.size() - 1 - ci;
          const auto size = static_cast<int64_t>(row_groups[ri].second.size() * col_groups[c].second.size()) * images;
          if ((size % nr == 0) == (whole == 1)) order_of_groups.emplace_back(ri, c);
        }
    for (const auto& [ri, ci] : order_of_groups) {
      const auto& [rr, rows] = row_groups[ri];
      const auto& [cr, cs] = col_groups[ci];
      // (Plain copies: clang 14's lambdas cannot capture structured bindings.)
      const Range kh = rr.empty() || cr.empty() ? Range{} : rr, kw = rr.empty() || cr.empty() ? Range{} : cr;
      auto push = [&](int64_t i, int64_t r, int64_t c) {
        n.push_back(i), oh.push_back(r), ow.push_back(c);
        col_kh.push_back(kh);
        col_kw.push_back(kw);
      };
      if (inner) {
        for (int64_t i0 = 0; i0 < images; i0 += kImageGroup)
          for (int64_t r : rows)
            for (int64_t c : cs)
              for (int64_t i = i0; i < std::min(images, i0 + kImageGroup); ++i) push(i, r, c);
      } else {
        for (int64_t i = 0; i < images; ++i)
          for (int64_t r : rows)
            for (int64_t c : cs) push(i, r, c);
      }
    }
    cols = static_cast<int64_t>(n.size());
    column_of.resize(static_cast<size_t>(cols));
    for (int64_t j = 0; j < cols; ++j) {
      out_off.push_back(n[col(j)] * g.out_channels * g.out_h * g.out_w + oh[col(j)] * g.out_w + ow[col(j)]);
      column_of[static_cast<size_t>((n[col(j)] * g.out_h + oh[col(j)]) * g.out_w + ow[col(j)])] = j;
    }
    // A panel needs the taps valid for some of its columns (the bounding
    // ranges of their kernel rows and columns).
    panels = ceil_div(cols, nr);
    panels_of_tap.resize(static_cast<size_t>(g.kernel_h * g.kernel_w));
    for (int64_t p = 0; p < panels; ++p) {
      Range h, w;
      for (int64_t j = p * nr; j < std::min(cols, (p + 1) * nr); ++j) {
        const Range a = col_kh[static_cast<size_t>(j)], b = col_kw[static_cast<size_t>(j)];
        if (a.empty()) continue;
        h = h.empty() ? a : Range{std::min(h.lo, a.lo), std::max(h.hi, a.hi)};
        w = w.empty() ? b : Range{std::min(w.lo, b.lo), std::max(w.hi, b.hi)};
      }
      for (int64_t a = h.lo; a < h.hi; ++a)
        for (int64_t b = w.lo; b < w.hi; ++b) panels_of_tap[static_cast<size_t>(a * g.kernel_w + b)].push_back(p);
    }
  }
  size_t col(int64_t j) const { return static_cast<size_t>(j); }

  // Offset of the input pixel that tap (a, b) of column j reads, from the
  // chunk's first image and the channel's plane start; -1 in the padding or
  // past the last column.
  int64_t input_offset(const Conv2dGeometry& g, int64_t j, int64_t a, int64_t b) const {
    if (j >= cols) return -1;
    const int64_t ih = oh[col(j)] * g.stride_h - g.pad_h + a * g.dilation_h;
    const int64_t iw = ow[col(j)] * g.stride_w - g.pad_w + b * g.dilation_w;
    if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) return -1;
    return n[col(j)] * g.in_channels * g.in_h * g.in_w + ih * g.in_w + iw;
  }
  // The input pixel (ih * in_w + iw) that tap (a, b) of column j reads; -1
  // in the padding or past the last column.
  int64_t input_pixel(const Conv2dGeometry& g, int64_t j, int64_t a, int64_t b) const {
    if (j >= cols) return -1;
    const int64_t ih = oh[col(j)] * g.stride_h - g.pad_h + a * g.dilation_h;
    const int64_t iw = ow[col(j)] * g.stride_w - g.pad_w + b * g.dilation_w;
    return ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w ? -1 : ih * g.in_w + iw;
  }
  // Whether columns [j, j + count) are one output pixel of consecutive images.
  bool one_pixel(int64_t j, int64_t count) const {
    if (j + count > cols) return false;
    for (int64_t k = 1; k < count; ++k)
      if (oh[col(j + k)] != oh[col(j)] || ow[col(j + k)] != ow[col(j)] || n[col(j + k)] != n[col(j)] + k) return false;
    return true;
  }
  // Offset of column j's output pixel from the chunk's first image and the channel's plane start.
  int64_t output_offset(int64_t j) const { return out_off[col(j)]; }
};

// Output pixels per chunk: the packed right operand of one K block of the
// forward (256 channels x this) stays in L2.
constexpr int64_t kChunkCols = 1024;
// Chunks of a vector's worth of images (ColumnOrder::kImagesInner, see
// ops/cpu/conv2d_im2col.cpp's forward) may have up to this many columns.
constexpr int64_t kMaxImageGroupCols = 4 * kChunkCols;

// Images per chunk: about `cols` output pixels, and a whole number of
// chunks per thread (the threads share the chunks out).
inline int64_t chunk_images(const Conv2dGeometry& g, int64_t cols) {
  const int64_t threads = conv2d_threads(g);
  const int64_t target = std::max<int64_t>(1, cols / (g.out_h * g.out_w));
  const int64_t chunks = std::max(threads, conv2d_gemm::round_up(ceil_div(g.batch, target), threads));
  return std::max<int64_t>(1, ceil_div(g.batch, chunks));
}

// Plans for the chunk sizes of one call (all chunks but the last have the same size).
class Plans {
 public:
  Plans(const Conv2dGeometry& g, int64_t nb, int64_t nr, ColumnOrder order = ColumnOrder::kPixelClasses) {
    if (g.batch == 0) return;
    full_.emplace_back(g, std::min(nb, g.batch), nr, order);
    if (g.batch % nb != 0 && g.batch > nb) full_.emplace_back(g, g.batch % nb, nr, order);
  }
  const ChunkPlan& operator()(int64_t images) const { return full_[0].images == images ? full_[0] : full_[1]; }

 private:
  std::vector<ChunkPlan> full_;
};


}  // namespace minidl::conv2d_plan
