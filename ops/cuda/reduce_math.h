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
// its element j sits at start + seg_offset[j / seg_len] + j % seg_len.
// Up to kInlineSegments offsets travel in the struct (kernel arguments);
// more are read from a device array.
inline constexpr int kInlineSegments = 8;

struct RowIndexer {
  OffsetCalculator<1> rows;
  int64_t seg_len = 1;
  int64_t nseg = 1;
  int64_t inline_offsets[kInlineSegments] = {};
  const int64_t* offsets = nullptr;  // device array of nseg offsets when nseg > kInlineSegments

  MINIDL_HOST_DEVICE int64_t row_start(int64_t r) const { return rows.get(r).v[0]; }
  MINIDL_HOST_DEVICE int64_t element(int64_t start, int64_t j) const {
    const int64_t s = j / seg_len;
    const int64_t seg = nseg <= kInlineSegments ? inline_offsets[s] : offsets[s];
    return start + seg + (j - s * seg_len);
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

}  // namespace minidl::cuda_math
