// The one loop every elementwise CPU kernel runs on: walks N operands that
// share a shape but may have any strides (views, broadcasting with stride 0),
// row by row along the innermost dimension, rows in parallel with OpenMP.
//
//   for_each_row<2>(shape, {out_strides, in_strides},
//       [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& step) {
//         for (int64_t i = 0; i < n; ++i) out[off[0] + i * step[0]] = f(in[off[1] + i * step[1]]);
//       });
//
// Adjacent dimensions that are contiguous for every operand are merged first,
// so a contiguous tensor is one long row (which the compiler vectorizes).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <utility>

#include "minidl/core/shape.h"
#include "minidl/core/tensor.h"

namespace minidl {

namespace detail {

// One row of n elements at steps `step`, from offset 0; split into chunks on
// the threads from min_parallel_numel elements.
template <size_t N, class RowFn>
void run_long_row(int64_t n, const std::array<int64_t, N>& step, RowFn& row, int64_t min_parallel_numel) {
  if (n < min_parallel_numel) return row(std::array<int64_t, N>{}, n, step);
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    std::array<int64_t, N> off;
    for (size_t k = 0; k < N; ++k) off[k] = c * kChunk * step[k];
    row(off, std::min(kChunk, n - c * kChunk), step);
  }
}

}  // namespace detail

// The dims of `shape` with size-1 dims dropped and neighbours merged where
// every operand is contiguous across them (innermost last); `empty` when a
// dim is 0. Shared by for_each_row and the tiled transposed copy.
template <size_t N>
struct MergedDims {
  Shape dims;
  std::array<Shape, N> strides;
  bool empty = false;
};

// One operand's strides, read where they lie (no copy).
using StridesRef = std::span<const int64_t>;

template <size_t N>
MergedDims<N> merge_dims(const Shape& shape, const std::array<StridesRef, N>& strides) {
  MergedDims<N> m;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (shape[d] == 0) {
      m.empty = true;
      return m;
    }
    bool merge = !m.dims.empty();
    for (size_t k = 0; k < N && merge; ++k) merge = m.strides[k].back() == strides[k][d] * shape[d];
    if (merge) {
      m.dims.back() *= shape[d];
      for (size_t k = 0; k < N; ++k) m.strides[k].back() = strides[k][d];
    } else {
      m.dims.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k) m.strides[k].push_back(strides[k][d]);
    }
  }
  return m;
}

// 1 if `strides` walk `shape` contiguously, 0 if they broadcast one element
// over it, else -1 (size-1 dims say nothing). Where every operand is 1 or 0,
// merge_dims would give one row of these steps: for_each_row takes it
// without merge_dims' allocations (most of the cost of an op on a small tensor).
inline int64_t flat_step(const Shape& shape, StridesRef strides) {
  bool contiguous = true, broadcast = true;
  int64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 1) continue;
    contiguous = contiguous && strides[d] == expected;
    broadcast = broadcast && strides[d] == 0;
    expected *= shape[d];
  }
  return contiguous ? 1 : broadcast ? 0 : -1;
}

template <size_t N, class RowFn>
void for_each_row(const Shape& shape, const std::array<StridesRef, N>& strides, RowFn&& row,
                  int64_t min_parallel_numel = 32768) {
  int64_t numel = 1;
  for (int64_t n : shape) numel *= n;
  if (numel == 0) return;
  std::array<int64_t, N> flat;
  bool all_flat = true;
  for (size_t k = 0; k < N; ++k) all_flat = all_flat && (flat[k] = flat_step(shape, strides[k])) >= 0;
  if (all_flat) return detail::run_long_row<N>(numel, flat, row, min_parallel_numel);
  MergedDims<N> m = merge_dims(shape, strides);
  Shape& dims = m.dims;
  std::array<Shape, N>& st = m.strides;
  const int64_t ndim = static_cast<int64_t>(dims.size());
  const int64_t inner = dims.back();
  std::array<int64_t, N> inner_step;
  for (size_t k = 0; k < N; ++k) inner_step[k] = st[k].back();
  int64_t outer = 1;
  for (int64_t d = 0; d + 1 < ndim; ++d) outer *= dims[d];

  auto run_row = [&](int64_t o) {
    std::array<int64_t, N> off{};
    int64_t rest = o;
    for (int64_t d = ndim - 2; d >= 0; --d) {
      const int64_t i = rest % dims[d];
      rest /= dims[d];
      for (size_t k = 0; k < N; ++k) off[k] += i * st[k][d];
    }
    row(off, inner, inner_step);
  };
  if (outer == 1) {
    detail::run_long_row<N>(inner, inner_step, row, min_parallel_numel);
  } else if (outer > 1 && outer * inner >= min_parallel_numel) {
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < outer; ++o) run_row(o);
  } else {
    for (int64_t o = 0; o < outer; ++o) run_row(o);
  }
}

// dst = src converted element by element (same shape, any strides):
// contiguous(src_row, dst_row, n) converts a contiguous run, convert(x) one
// element of a strided one.
template <class D, class S, class Contiguous, class Convert>
void copy_strided(const Tensor& dst, const Tensor& src, Contiguous contiguous, Convert convert) {
  D* out = static_cast<D*>(dst.raw_data());
  const S* in = static_cast<const S*>(src.raw_data());
  for_each_row<2>(dst.shape(), {dst.strides(), src.strides()},
                  [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& step) {
                    D* o = out + off[0];
                    const S* i = in + off[1];
                    if (step[0] == 1 && step[1] == 1) {
                      contiguous(i, o, n);
                    } else {
                      for (int64_t k = 0; k < n; ++k) o[k * step[0]] = convert(i[k * step[1]]);
                    }
                  });
}

}  // namespace minidl
