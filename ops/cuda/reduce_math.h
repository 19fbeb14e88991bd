// The math of the CUDA reductions, shared with the CPU tests: where row r's
// j-th element lives (ops/reduce.h's RowLayout), the max/min pick with its
// index, and the variance from squared and plain deviations. Plain C++ with
// MINIDL_HOST_DEVICE, no CUDA header.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE
#include "minidl/ops/cuda/offset_calculator.h"

namespace minidl::cuda_math {

// RowLayout on the device: row r starts at rows.get(r) (the kept dims), and
// its element j sits at start + seg_offset[j / seg_len] + j % seg_len, where
// seg_offset[s] = segs.get(s) walks RowLayout's seg_shape/seg_strides. No
// table: an uploaded one cost a pageable copy and a host callback per call
// and could not be captured into a CUDA graph (NCHW summed over {0, 2, 3}
// has N segments).
struct RowIndexer {
  OffsetCalculator<1> rows;
  OffsetCalculator<1> segs;
  int64_t seg_len = 1;

  MINIDL_HOST_DEVICE int64_t row_start(int64_t r) const { return rows.get(r).v[0]; }
  MINIDL_HOST_DEVICE int64_t element(int64_t start, int64_t j) const {
    const int64_t s = j / seg_len;
    return start + segs.get(s).v[0] + (j - s * seg_len);
  }
};

// A value and its index along the row; index -1: no element yet.
template <class T>
struct ValueIndex {
  T value;
  int64_t index;
};

template <class T>
MINIDL_HOST_DEVICE inline bool is_nan_value(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    return false;
  }
}

// The max (or min) of two candidates: NaN beats everything (PyTorch
// propagates NaN); equal values (or two NaNs) keep the smaller index, so the
// result is the first extreme element whatever order candidates meet in
// (commutative and associative, as a parallel reduction needs).
template <bool kIsMax, class T>
MINIDL_HOST_DEVICE inline ValueIndex<T> pick_extremum(const ValueIndex<T>& a, const ValueIndex<T>& b) {
  if (a.index < 0) return b;
  if (b.index < 0) return a;
  const bool an = is_nan_value(a.value), bn = is_nan_value(b.value);
  if (an || bn) {
    if (an && bn) return a.index <= b.index ? a : b;
    return an ? a : b;
  }
  if (a.value == b.value) return a.index <= b.index ? a : b;
  return (kIsMax ? a.value > b.value : a.value < b.value) ? a : b;
}

// Squared and plain deviations from a mean, summed.
struct Deviations {
  double sq = 0.0;
  double lin = 0.0;
};

MINIDL_HOST_DEVICE inline Deviations add_deviations(const Deviations& a, const Deviations& b) {
  return Deviations{a.sq + b.sq, a.lin + b.lin};
}

// The CPU kernel's two-pass variance: sum (x-m)^2 corrected by (sum (x-m))^2 / n,
// over max(0, n - correction); a negative rounding result becomes 0, NaN stays.
MINIDL_HOST_DEVICE inline double variance_from_deviations(const Deviations& d, int64_t n, int64_t correction) {
  const double ss = d.sq - d.lin * d.lin / static_cast<double>(n);
  const double denom = static_cast<double>(n - correction > 0 ? n - correction : 0);
  return (ss < 0.0 ? 0.0 : ss) / denom;
}

// The tiled column reduction (ops/cuda/column_reduce.cuh): many columns whose
// j-th values are neighbours in memory (LayerNorm's per-channel sums over
// rows, channels-last BatchNorm's over N*H*W), a block per 32 columns x one
// chunk of chunk_rows(len) rows. Slice t of the block (threadIdx.y) sums rows
// b chunk_rows + t + k kSlices, k = 0, 1, ... in that order; the block then
// combines its slices in slice order, and a second pass (launch_row_reduce
// over the partials) combines the chunks: in chunk order when there are <= 32
// chunks or >= 1024 columns (a thread per column, column_tiled_reduce below),
// else in its block order. The order depends on the sizes and these constants
// only: deterministic, whatever the device or the grid. On an H100: 32
// columns of float is one 128-byte line per warp load; 16 slices make
// 512-thread blocks (4 resident per SM); chunks of at least 128 rows (8 a
// thread) give 128 x 65536 LayerNorm's backward 2048 blocks (about 4 waves
// over 132 SMs x 4) and need the second pass only above 128 rows. Long
// columns take at most kMaxChunks chunks, PyTorch's grid for channels-last
// BatchNorm (MAX_H_BLOCK): with 128-row chunks channels-last BatchNorm's
// statistics on (128, 64, 32, 32) were 2048 blocks of 8 rows a thread, and its
// forward 0.58x PyTorch's on an H100 (2026-11-28); now 256 blocks of 64 rows
// a thread.
struct ColumnTiling {
  static constexpr int kCols = 32, kSlices = 16;
  static constexpr int64_t kMinChunkRows = 128, kMaxChunks = 128;
  // Rows of a chunk: a multiple of kSlices, at least kMinChunkRows.
  MINIDL_HOST_DEVICE static int64_t chunk_rows(int64_t len) {
    const int64_t even = (len + kMaxChunks - 1) / kMaxChunks;
    const int64_t rows = (even + kSlices - 1) / kSlices * kSlices;
    return rows > kMinChunkRows ? rows : kMinChunkRows;
  }
  MINIDL_HOST_DEVICE static int64_t chunks(int64_t len) {
    const int64_t rows = chunk_rows(len);
    return (len + rows - 1) / rows;
  }
  // Row k of slice t in chunk b (chunks of `rows` rows); counts only when < chunk_end.
  MINIDL_HOST_DEVICE static int64_t row(int64_t rows, int64_t b, int t, int64_t k) {
    return b * rows + t + k * kSlices;
  }
  MINIDL_HOST_DEVICE static int64_t chunk_end(int64_t rows, int64_t b, int64_t len) {
    return (b + 1) * rows < len ? (b + 1) * rows : len;
  }
};

// The kernels' combination order on the host (the CPU tests): a column of
// len rows, value(j) as Acc, combined as column_reduce.cuh does (<= 32 chunks
// or >= 1024 columns; otherwise the chunks are combined in another fixed order).
template <class Acc, class Value, class Combine>
Acc column_tiled_reduce(int64_t len, Acc init, const Value& value, const Combine& combine) {
  const int64_t rows = ColumnTiling::chunk_rows(len);
  Acc total = init;
  for (int64_t b = 0; b < ColumnTiling::chunks(len); ++b) {
    Acc block = init;
    for (int t = 0; t < ColumnTiling::kSlices; ++t) {
      Acc acc = init;
      for (int64_t k = 0; k < rows / ColumnTiling::kSlices; ++k) {
        const int64_t j = ColumnTiling::row(rows, b, t, k);
        if (j < ColumnTiling::chunk_end(rows, b, len)) acc = combine(acc, value(j));
      }
      block = t == 0 ? acc : combine(block, acc);
    }
    total = b == 0 ? block : combine(total, block);
  }
  return total;
}

}  // namespace minidl::cuda_math
