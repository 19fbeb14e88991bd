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
// exp is ExpOp below: Eigen's packet exp, except float without AVX-512,
// where Eigen's is its slow generic form and vec::pexp_float_fast_normal
// (ops/cpu/array_math.h) replaces it. Either can leave a tiny positive where
// the exact result is below the smallest normal number (Eigen's clamps its
// argument: exp(-inf) = 2.9e-39 for float with AVX2 packets, 5.6e-309 for
// double; 0 with AVX-512's float), so exp_into flushes results below the
// smallest normal number to 0 in the same pass, exp(-inf) = 0 as softmax
// needs (not needed where the values are only summed; folded into softmax's
// scaling pass there; test_softmax_vectorized checks exp(-inf) = 0 in both
// builds).
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

#include "minidl/ops/cpu/array_math.h"
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

// Whether float exp is vec::pexp_float_fast_normal rather than Eigen's: without
// AVX-512, where Eigen's float exp is its generic form (a slow ldexp), 1.7x
// slower (AVX2, 256000 values, 1 thread: 0.094 vs 0.055 ms); with AVX-512
// Eigen's own packet exp is as fast and is kept.
template <class T>
constexpr bool kFastExp =
#if defined(__AVX512F__)
    false;
#else
    std::is_same_v<T, float>;
#endif

// exp for the softmax kernels' arguments (x - max, or log_softmax's output:
// <= 0 up to rounding, or NaN), unflushed: below the smallest normal number
// the result may be 0 or a tiny positive.
template <class T>
struct ExpOp {
  T operator()(const T& x) const { return std::exp(x); }
  template <class Packet>
  Packet packetOp(const Packet& x) const {
    if constexpr (kFastExp<T>) return vec::pexp_float_fast_normal(x);
    else return Eigen::internal::pexp(x);
  }
};

// ExpOp with results below the smallest normal number flushed to 0 in the
// same pass (a compare and an and-not), so exp(-inf) = 0. NaN: not <, kept.
template <class T>
struct ExpFlushedOp {
  T operator()(const T& x) const {
    const T e = std::exp(x);
    return e < std::numeric_limits<T>::min() ? T(0) : e;
  }
  template <class Packet>
  Packet packetOp(const Packet& x) const {
    using namespace Eigen::internal;
    const Packet e = ExpOp<T>().packetOp(x);
    if constexpr (!kExpNeedsFlush<T>) return e;
    else return pandnot(e, pcmp_lt(e, pset1<Packet>(std::numeric_limits<T>::min())));
  }
};

// out[0, n) = exp(expr) for an Eigen array expression of n values, flushed
// (see the header comment).
template <class T, class Expr>
inline void exp_into(T* out, int64_t n, const Expr& expr) {
  Run<T>(out, n) = expr.unaryExpr(ExpFlushedOp<T>());
}

// exp_into without the flush, for values that are only summed (a tiny
// positive in place of 0 changes no sum that has a term >= 1 in it).
template <class T, class Expr>
inline void exp_for_sum(T* out, int64_t n, const Expr& expr) {
  Run<T>(out, n) = expr.unaryExpr(ExpOp<T>());
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

namespace Eigen::internal {

template <class T>
struct functor_traits<minidl::cpu::softmax_rows::ExpOp<T>> {
  enum { Cost = 10 * NumTraits<T>::MulCost, PacketAccess = packet_traits<T>::HasExp };
};
template <class T>
struct functor_traits<minidl::cpu::softmax_rows::ExpFlushedOp<T>> {
  enum { Cost = 11 * NumTraits<T>::MulCost, PacketAccess = packet_traits<T>::HasExp && packet_traits<T>::HasCmp };
};

}  // namespace Eigen::internal
