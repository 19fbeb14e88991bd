// The math of the CUDA normalization core (ops/cuda/norm_core.cu), shared
// with the CPU tests: Welford statistics with Chan's parallel merge, where a
// group's j-th value and a channel's j-th value live in the (A, G, K, S) view
// of ops/norm_core.h, and PyTorch's normalize / backward / running-statistics
// formulas. Plain C++ with MINIDL_HOST_DEVICE, no CUDA header.
#pragma once

#include <cmath>
#include <cstdint>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE
#include "minidl/ops/cuda/opmath.h"
#include "minidl/ops/cuda/int_divider.h"

namespace minidl::cuda_math {

// Count, mean and sum of squared deviations of a set of values, in double.
struct Welford {
  double n = 0, mean = 0, m2 = 0;
};

MINIDL_HOST_DEVICE inline Welford welford_of(double x) { return Welford{1.0, x, 0.0}; }

// Chan, Golub and LeVeque's merge of two sets' moments (with b a single
// value it is Welford's update): n = na + nb, mean = ma + d nb / n,
// M2 = M2a + M2b + d^2 na nb / n with d = mb - ma. An empty side returns the other.
MINIDL_HOST_DEVICE inline Welford welford_merge(const Welford& a, const Welford& b) {
  if (b.n == 0) return a;
  if (a.n == 0) return b;
  const double n = a.n + b.n;
  const double delta = b.mean - a.mean;
  const double nb_over_n = b.n / n;
  return Welford{n, a.mean + delta * nb_over_n, a.m2 + b.m2 + delta * delta * a.n * nb_over_n};
}

// Shifted plain sums, the per-element accumulator of the "shifted" statistics
// kernel (ops/cuda/norm_stats.cuh): s1 = sum (x - shift), s2 = sum (x - shift)^2
// in double, with shift a value of the group (its first), so |mean - shift| is
// about one standard deviation for ordinary data and s2 - s1^2/n loses about
// one bit, not the log2((mean/std)^2) bits of unshifted sums. Per element: a
// subtract, an add and a fused multiply-add (Welford: a division and five more
// double ops). Addition is associative up to rounding, and the reduction order
// is fixed by index, so results are deterministic. Weakness: a shift that is an
// outlier of k standard deviations loses about log2(k^2) bits (Welford does not).
struct ShiftedSums {
  double s1 = 0, s2 = 0;
};

MINIDL_HOST_DEVICE inline ShiftedSums shifted_of(double x, double shift) {
  const double d = x - shift;
  return ShiftedSums{d, d * d};
}

MINIDL_HOST_DEVICE inline ShiftedSums shifted_add(const ShiftedSums& a, const ShiftedSums& b) {
  return ShiftedSums{a.s1 + b.s1, a.s2 + b.s2};
}

// The moments of n values from their shifted sums: mean = shift + s1/n,
// M2 = s2 - s1^2/n (a negative one, from rounding, clamped to 0; a NaN, from
// a NaN or infinite value, kept: the CPU's two passes and Welford give NaN).
MINIDL_HOST_DEVICE inline Welford welford_from_shifted(const ShiftedSums& s, double n, double shift) {
  if (n == 0) return Welford{};
  const double d = s.s1 / n;
  const double m2 = s.s2 - s.s1 * d;
  return Welford{n, shift + d, m2 < 0 ? 0.0 : m2};
}

// The (A, G, K, S) view with P groups per affine parameter set (ops/norm_core.h).
// with_dividers() precomputes the index divisions (ops/cuda/int_divider.h) when
// every offset fits 31 bits; without them (aggregate-initialized, or a huge
// tensor) the same functions divide in 64 bits.
struct NormShape {
  int64_t A = 1, G = 1, K = 1, S = 1, P = 1;
  bool fast = false;
  IntDivider by_run, by_G, by_K, by_S, by_P, by_A;  // run = K S

  NormShape with_dividers() const {
    NormShape r = *this;
    // Empty tensors (a zero dim) keep the 64-bit path: no divider by zero.
    r.fast = A > 0 && G > 0 && K > 0 && S > 0 && P > 0 && fits_int_divider(A * G * K * S);
    if (r.fast) {
      r.by_run = IntDivider(K * S), r.by_G = IntDivider(G), r.by_K = IntDivider(K);
      r.by_S = IntDivider(S), r.by_P = IntDivider(P), r.by_A = IntDivider(A);
    }
    return r;
  }
  MINIDL_HOST_DEVICE int64_t group_size() const { return A * K * S; }
  MINIDL_HOST_DEVICE int64_t channels() const { return P * K; }
  // The fast paths skip the divisions a geometry makes trivial (the
  // branches are uniform across a launch): A == 1 (GroupNorm, InstanceNorm,
  // LayerNorm: a group is one contiguous run), S == 1 (LayerNorm), P == 1
  // (LayerNorm: every group holds all channels), K == 1 (BatchNorm). On an
  // H100 LayerNorm (C, H, W)'s group sums on (128, 64, 32, 32) read at a third
  // of the memory bandwidth with ~6 divisions an element; without them its
  // forward + backward went 0.226 -> 0.215 ms (2026-11-27).
  //
  // Offset of value j (0 <= j < A K S, in (a, k, s) order) of group g.
  MINIDL_HOST_DEVICE int64_t group_offset(int64_t g, int64_t j) const {
    const int64_t run = K * S;
    if (fast) {
      if (A == 1) return g * run + j;
      const int64_t a = by_run.div(static_cast<uint32_t>(j));
      return (a * G + g) * run + (j - a * run);
    }
    return ((j / run) * G + g) * run + j % run;
  }
  // Group and channel of the element at `offset`.
  MINIDL_HOST_DEVICE int64_t group_of(int64_t offset) const {
    if (fast) {
      const uint32_t run_index = by_run.div(static_cast<uint32_t>(offset));
      return A == 1 ? run_index : by_G.mod(run_index);  // with A == 1 there are G runs
    }
    return (offset / (K * S)) % G;
  }
  MINIDL_HOST_DEVICE int64_t channel_of(int64_t offset) const {
    if (fast) {
      const uint32_t p = P == 1 ? 0u : by_P.mod(static_cast<uint32_t>(group_of(offset)));
      if (K == 1) return p;
      const uint32_t k = by_K.mod(S == 1 ? static_cast<uint32_t>(offset) : by_S.div(static_cast<uint32_t>(offset)));
      return static_cast<int64_t>(p) * K + k;
    }
    return (group_of(offset) % P) * K + (offset / S) % K;
  }
  // Channel of value j of group g: channel_of(group_offset(g, j)), which
  // LayerNorm's geometry makes j itself.
  MINIDL_HOST_DEVICE int64_t channel_in_group(int64_t g, int64_t j) const {
    if (A == 1 && S == 1 && P == 1) return j;
    return channel_of(group_offset(g, j));
  }
  // Values of channel c: its G/P groups g = c/K + q P, each with A runs of S
  // values at k = c % K. Value j is (q, a, s) in that order; returns its offset
  // and sets its group.
  MINIDL_HOST_DEVICE int64_t channel_size() const { return (G / P) * A * S; }
  MINIDL_HOST_DEVICE int64_t channel_offset(int64_t c, int64_t j, int64_t& group) const {
    int64_t s, a, q;
    if (fast) {
      if (A == 1 && S == 1 && P == 1) {  // LayerNorm: value j of channel c is in group j
        group = j;
        return j * K + c;
      }
      const uint32_t js = S == 1 ? static_cast<uint32_t>(j) : by_S.div(static_cast<uint32_t>(j));
      s = j - static_cast<int64_t>(js) * S;
      q = A == 1 ? js : by_A.div(js);
      a = js - q * A;
      const uint32_t ck = by_K.div(static_cast<uint32_t>(c));
      group = ck + q * P;
      return ((a * G + group) * K + (c - static_cast<int64_t>(ck) * K)) * S + s;
    }
    s = j % S, a = (j / S) % A, q = j / (S * A);
    group = c / K + q * P;
    return ((a * G + group) * K + c % K) * S + s;
  }
};

// BatchNorm's geometry (K == 1, P == G): each group is exactly one channel,
// c = (g % P) K + k = g. Then the backward's per-group sums and its
// per-channel parameter-gradient sums run over the same values, and one
// reduction of the unweighted u1 = sum dy, u2 = sum dy (x - mean) gives both
// (group_param_sums), where the general path reduces dy and x twice.
MINIDL_HOST_DEVICE inline bool groups_are_channels(const NormShape& s) { return s.K == 1 && s.P == s.G; }

// From one group-is-channel's u1 = sum dy, u2 = sum dy (x - mean), in double:
// the w-weighted sums of the backward (w constant over the group, so
// sum w dy = w u1) and the parameter gradients sum dy (x - mean) invstd =
// u2 invstd and sum dy = u1 (ops/norm_core.h). weight: 1 without one.
struct GroupParamSums {
  double sum_dy, sum_dy_xmu, grad_weight, grad_bias;
};

MINIDL_HOST_DEVICE inline GroupParamSums group_param_sums(double u1, double u2, double weight, double invstd) {
  return GroupParamSums{weight * u1, weight * u2, u2 * invstd, u1};
}

// The statistics of a group from its moments: biased variance, invstd =
// 1/sqrt(var + eps); no values gives zeros (the CPU kernel's convention).
struct GroupStatistics {
  double mean, var, invstd;
};

MINIDL_HOST_DEVICE inline GroupStatistics statistics_of(const Welford& w, double eps) {
  if (w.n == 0) return GroupStatistics{0.0, 0.0, 0.0};
  const double var = w.m2 / w.n;
  return GroupStatistics{w.mean, var, 1.0 / std::sqrt(var + eps)};
}

// The elementwise passes in two steps: a group's factors (double math,
// rounded to the compute type T), then the few T operations per element.
// Where a group has one weight (K == 1: BatchNorm, InstanceNorm) the CUDA
// kernels make the factors once per group (ops/cuda/norm_factors.cuh): per element
// they were 2 double divisions, ~6 double products and 4-5 conversions, which
// bound the dx pass rather than memory on an H100 (~55 us for 96 MiB).
template <class T>
struct NormalizeFactors {
  T mean, scale, bias;
};

// y = (x - mean) * (invstd * w) + b, the factors rounded to T as the CPU kernel.
template <class T>
MINIDL_HOST_DEVICE inline NormalizeFactors<T> normalize_factors(double mean, double invstd, double weight, T bias) {
  return NormalizeFactors<T>{static_cast<T>(mean), static_cast<T>(invstd * weight), bias};
}

template <class T>
MINIDL_HOST_DEVICE inline T normalize_with(T x, const NormalizeFactors<T>& f) {
  return (x - f.mean) * f.scale + f.bias;
}

template <class T>
MINIDL_HOST_DEVICE inline T normalize_value(T x, double mean, double invstd, double weight, T bias) {
  return normalize_with(x, normalize_factors<T>(mean, invstd, weight, bias));
}

template <class T>
struct BackwardFactors {
  T scale, mean, beta, gamma;
};

// dx = dy * invstd * w + (x - mean) * beta + gamma with, for batch statistics,
// beta = -invstd^3 sum_dy_xmu / count and gamma = -invstd sum_dy / count
// (sums w-weighted), both 0 when the statistics were constants.
// dx's scale, invstd * w rounded once; K > 1 passes make it per element
// (a group spans channels of different weights), the rest per group.
template <class T>
MINIDL_HOST_DEVICE inline T backward_scale(double invstd, double weight) {
  return static_cast<T>(invstd * weight);
}

template <class T>
MINIDL_HOST_DEVICE inline BackwardFactors<T> backward_factors(double mean, double invstd, double weight,
                                                              bool batch_stats, double sum_dy, double sum_dy_xmu,
                                                              double count) {
  double beta = 0, gamma = 0;
  if (batch_stats) {
    beta = -invstd * invstd * invstd * sum_dy_xmu / count;
    gamma = -invstd * sum_dy / count;
  }
  return BackwardFactors<T>{backward_scale<T>(invstd, weight), static_cast<T>(mean), static_cast<T>(beta),
                            static_cast<T>(gamma)};
}

template <class T>
MINIDL_HOST_DEVICE inline T backward_with(T dy, T x, const BackwardFactors<T>& f) {
  return dy * f.scale + (x - f.mean) * f.beta + f.gamma;
}

template <class T>
MINIDL_HOST_DEVICE inline T norm_backward_value(T dy, T x, double mean, double invstd, double weight, bool batch_stats,
                                                double sum_dy, double sum_dy_xmu, double count) {
  return backward_with(dy, x, backward_factors<T>(mean, invstd, weight, batch_stats, sum_dy, sum_dy_xmu, count));
}

// The two on stored values (float16/bfloat16 inputs compute in float and
// round once, ops/cuda/opmath.h; float and double are the functions above).
// `bias` is already in the compute type (a float32 or 16-bit parameter).
template <class T>
MINIDL_HOST_DEVICE inline T normalize_value_stored(T x, double mean, double invstd, double weight, opmath_t<T> bias) {
  return from_opmath<T>(normalize_value<opmath_t<T>>(to_opmath(x), mean, invstd, weight, bias));
}

template <class T>
MINIDL_HOST_DEVICE inline T norm_backward_value_stored(T dy, T x, double mean, double invstd, double weight,
                                                       bool batch_stats, double sum_dy, double sum_dy_xmu,
                                                       double count) {
  return from_opmath<T>(norm_backward_value<opmath_t<T>>(to_opmath(dy), to_opmath(x), mean, invstd, weight, batch_stats,
                                                      sum_dy, sum_dy_xmu, count));
}

// PyTorch's running update: (1 - momentum) running + momentum batch.
MINIDL_HOST_DEVICE inline double running_update(double running, double batch, double momentum) {
  return (1.0 - momentum) * running + momentum * batch;
}

// SyncBatchNorm's count-weighted merge of one rank's (mean, invstd) over
// count values into the running (n, avg, var_n) of the ranks before it
// (ops/batch_norm_sync.h; PyTorch's batch_norm_reduce_statistics_kernel):
// the rank's biased variance is 1/invstd^2 - eps. A rank with count < 1 (an
// empty rank) is skipped: zero weight, and no inf * 0 from its invstd of 0.
struct SyncMerge {
  double n = 0, avg = 0, var_n = 0;  // var_n: the sum of squared deviations
};

MINIDL_HOST_DEVICE inline SyncMerge sync_merge_rank(SyncMerge s, double count, double mean, double invstd, double eps) {
  if (count < 1) return s;
  const double sd = 1.0 / invstd;
  const double vk = (sd * sd - eps) * count;
  const double factor = 1.0 / (s.n + count);
  s.var_n += vk + (s.avg - mean) * (s.avg - mean) * s.n * count * factor;
  s.avg = s.n * factor * s.avg + count * factor * mean;
  s.n += count;
  return s;
}

// One channel c of batch_norm_gather_stats_with_counts (ops/batch_norm_sync.h):
// the W ranks' (mean, invstd) rows merged in rank order, the global mean and
// invstd written, and running statistics of any floating type T (float,
// double, Half, BFloat16; nullptr: none) updated in double and rounded once,
// when some rank had values.
template <class T>
MINIDL_HOST_DEVICE inline void sync_gather_channel(const double* counts, const double* means, const double* invstds,
                                                   int64_t W, int64_t C, int64_t c, double eps, double momentum,
                                                   double* mean, double* invstd, T* running_mean, T* running_var) {
  SyncMerge s;
  for (int64_t w = 0; w < W; ++w) s = sync_merge_rank(s, counts[w], means[w * C + c], invstds[w * C + c], eps);
  mean[c] = s.avg;
  invstd[c] = s.n > 0 ? 1.0 / std::sqrt(s.var_n / s.n + eps) : 0.0;
  if (running_mean && s.n > 0) {  // nothing to learn when no rank had values
    running_mean[c] = convert<T>(running_update(convert<double>(running_mean[c]), s.avg, momentum));
    running_var[c] = convert<T>(running_update(convert<double>(running_var[c]), s.var_n / (s.n - 1), momentum));
  }
}

// SyncBatchNorm backward's w-weighted sum of one channel (w: float, double,
// Half or BFloat16; nullptr: no weight, the sum as it is).
template <class T>
MINIDL_HOST_DEVICE inline double sync_weighted_sum(double sum, const T* w, int64_t c) {
  return w ? sum * convert<double>(w[c]) : sum;
}

}  // namespace minidl::cuda_math
