// Vectorized building blocks of the softmax-family CPU kernels
// (ops/cpu/softmax.cpp, the cross_entropy kernels of ops/cpu/loss.cpp): max,
// exp and float64 sums over contiguous runs of float or double.
//
// GCC does not vectorize std::exp/std::log, so exp and log go through Eigen's
// packet math (array expressions over Eigen::Map). Sums are accumulated in
// float64 with vector accumulators (cpu::sum_of, the reductions' own). A
// result depends on the run's length, its start address modulo the vector
// width (Eigen does the unaligned head in scalar code; CPU storage is 64-byte
// aligned, so that is a function of the shape) and the ISA, never on the
// thread count. Hence the kernels' stack
// buffers are alignas(64): an unaligned one would make values depend on each
// thread's stack, i.e. on the thread count.
//
// Eigen's exp clamps its argument below (float: -88.72, double: -709.78), so
// exp(-inf) comes out as a tiny positive number (2.9e-39 for float with AVX2
// packets, 0 with AVX-512's; 5.6e-309 for double): exp_into flushes results
// below the smallest normal number to 0, so exp(-inf) = 0 as softmax needs
// (an extra pass, 5-10% of a softmax: skipped where Eigen's packets give 0,
// not needed where the values are only summed, folded into softmax's scaling
// pass; test_softmax_vectorized checks exp(-inf) = 0 in both builds).
#pragma once

// GCC 12 reports its own _mm512_undefined_* inside AVX-512 intrinsics (in
// Eigen's packet math) as "may be used uninitialized" where they are inlined into the
// including file (GCC bug 105593): not our code, and harmless.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "minidl/ops/cpu/sum_span.h"

namespace minidl::cpu::softmax_rows {

template <class T>
using Run = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ConstRun = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// Largest of p[0, n) (-inf when n == 0). With a NaN in the run the result is
// unspecified (Eigen's fast max), which is harmless here: the NaN reaches
// every output of its row through the sum of exps either way.
template <class T>
inline T run_max(const T* p, int64_t n) {
  return n > 0 ? ConstRun<T>(p, n).maxCoeff() : -std::numeric_limits<T>::infinity();
}

// Whether Eigen's exp can leave tiny positives where 0 is right (all but float with AVX-512).
template <class T>
constexpr bool kExpNeedsFlush =
#if defined(__AVX512F__)
    !std::is_same_v<T, float>;
#else
    true;
#endif

// out[0, n) = exp(expr) for an Eigen array expression of n values, flushed
// (see the header comment).
template <class T, class Expr>
inline void exp_into(T* out, int64_t n, const Expr& expr) {
  Run<T>(out, n) = expr.exp();
  if constexpr (kExpNeedsFlush<T>) {
    constexpr T kMin = std::numeric_limits<T>::min();
    for (int64_t i = 0; i < n; ++i) out[i] = out[i] < kMin ? T(0) : out[i];
  }
}

// exp_into without the flush, for values that are only summed (a tiny
// positive in place of 0 changes no sum that has a term >= 1 in it).
template <class T, class Expr>
inline void exp_for_sum(T* out, int64_t n, const Expr& expr) {
  Run<T>(out, n) = expr.exp();
}

// p[i] *= scale[i] (scale_step 1) or *= scale[0] (scale_step 0), with the flush
// of exp_into folded in: p holds exp_for_sum's values.
template <class T>
inline void scale_flushed(T* p, int64_t n, const T* scale, int64_t scale_step) {
  if constexpr (kExpNeedsFlush<T>) {
    constexpr T kMin = std::numeric_limits<T>::min();
    // Select, then multiply: the form GCC if-converts and vectorizes.
    if (scale_step == 0) {
      const T s = scale[0];
      for (int64_t i = 0; i < n; ++i) {
        const T v = p[i] < kMin ? T(0) : p[i];
        p[i] = v * s;
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const T v = p[i] < kMin ? T(0) : p[i];
        p[i] = v * scale[i];
      }
    }
  } else if (scale_step == 0) {
    Run<T>(p, n) *= scale[0];
  } else {
    Run<T>(p, n) *= ConstRun<T>(scale, n);
  }
}

// sum_i double(p[i]) and sum_i double(a[i] * b[i]) (the product rounded to T
// first, as the scalar loops did): sum_of, every value widened to double
// (ops/cpu/sum_span.h), not sum_span's float32 groups: the softmax and loss
// sums keep the accuracy (and bits) they had.
template <class T>
inline double widened_sum(const T* p, int64_t n) {
  return sum_of<double>(n, [p](int64_t i) { return p[i]; });
}
template <class T>
inline double widened_dot(const T* a, const T* b, int64_t n) {
  return sum_of<double>(n, [a, b](int64_t i) { return a[i] * b[i]; });
}

// Rows shorter than kShortRow go through the vector math several at a time,
// up to kShortRowsBlock values, each row's scalar (max, lse, 1 / sum) spread
// to a per-value buffer: per row, a run of a few values would be the tail
// loop of scalar std::exp.
constexpr int64_t kShortRow = 32;
constexpr int64_t kShortRowsBlock = 1024;

// buf[r * D + d] = per_row[r] for r < rows, d < D.
template <class T>
inline void spread_rows(const T* per_row, int64_t rows, int64_t D, T* buf) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < D; ++d) buf[r * D + d] = per_row[r];
}

// The first half of a softmax over `rows` short rows of D values at x
// (rows * D <= kShortRowsBlock): mx[r] = row r's max, e = exp(x - mx) of every
// value (unflushed: exp_for_sum), sums[r] = row r's sum of e in double.
// spread: scratch of rows * D values.
template <class T>
inline void short_rows_exp_sums(const T* x, int64_t rows, int64_t D, T* mx, T* spread, T* e, double* sums) {
  for (int64_t r = 0; r < rows; ++r) {
    T v = -std::numeric_limits<T>::infinity();
    for (int64_t d = 0; d < D; ++d) v = std::max(v, x[r * D + d]);
    mx[r] = v;
  }
  spread_rows(mx, rows, D, spread);
  const int64_t m = rows * D;
  exp_for_sum(e, m, ConstRun<T>(x, m) - ConstRun<T>(spread, m));
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (int64_t d = 0; d < D; ++d) sum += static_cast<double>(e[r * D + d]);
    sums[r] = sum;
  }
}

// sum[i] += double(p[i]) for i in [0, n): the column-wise sums (plain loop, vectorized by the compiler).
template <class T>
inline void add_widened(double* sum, const T* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) sum[i] += static_cast<double>(p[i]);
}

}  // namespace minidl::cpu::softmax_rows
