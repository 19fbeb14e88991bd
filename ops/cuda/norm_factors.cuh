// Per-group factors for ops/cuda/norm_core.cu's elementwise passes: the
// double math of the formulas (invstd * w; dx's beta and gamma with their
// divisions by the count) done once a group, rounded to the compute type
// exactly as the per-element functions round it (cuda_math::NormalizeFactors /
// BackwardFactors: the same expressions, so the same values), so that a pass
// does 2-4 compute-type operations an element. Where a group has one weight
// (K == 1: BatchNorm NCHW and channels-last, InstanceNorm outside its fused
// kernels; that group g's channel is g % P is checked in
// tests/test_cuda_kernel_math) the factors are whole; where it spans channels
// (LayerNorm, GroupNorm outside the fused kernels) dx's scale invstd * w is
// made per element (one double product) and the rest per group. The factors
// come from the reductions' stores where a reduction runs anyway (training),
// else from a thread per group over statistics and sums already in memory
// (eval mode's running statistics, SyncBN's all-reduced sums, a backward
// without batch statistics). Compiled, not run on a GPU (2026-11-28/29);
// MINIDL_CUDA_NORM_KERNELS=legacy keeps the per-element passes.
#pragma once

#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/cuda/norm_math.h"
#include "minidl/ops/cuda/norm_stats.cuh"
#include "minidl/ops/cuda/vectorized.cuh"

namespace minidl::norm::factors {

using cuda_math::NormShape;
using cuda_math::Offsets;
using cuda_math::from_opmath;
using cuda_math::opmath_t;
using cuda_math::to_opmath;

template <class T>
using Normalize = cuda_math::NormalizeFactors<opmath_t<T>>;
template <class T>
using Backward = cuda_math::BackwardFactors<opmath_t<T>>;

// T: the input's dtype; W: the parameters' (T, or float32 next to a 16-bit
// input); w, b optional; c the group's channel.
template <class T, class W>
__device__ Normalize<T> normalize_of(double mean, double invstd, const W* w, const W* b, int64_t c) {
  using C = opmath_t<T>;
  return cuda_math::normalize_factors<C>(mean, invstd, w ? convert<double>(w[c]) : 1.0,
                                         b ? static_cast<C>(to_opmath(b[c])) : C(0));
}

template <class T, class W>
__device__ Backward<T> backward_of(double mean, double invstd, const W* w, int64_t c, bool batch_stats, double sum_dy,
                                   double sum_dy_xmu, double count) {
  return cuda_math::backward_factors<opmath_t<T>>(mean, invstd, w ? convert<double>(w[c]) : 1.0, batch_stats,
                                                  sum_dy, sum_dy_xmu, count);
}

// The statistics' store (training forward) that also makes the group's normalize factors.
template <class T, class W>
struct StatsStore {
  stats::StatsStore stats;
  const W *w, *b;
  Normalize<T>* factors;
  int64_t P;
  __device__ void store(int64_t g, const cuda_math::Welford& welford) const {
    const cuda_math::GroupStatistics s = stats.store(g, welford);
    factors[g] = normalize_of<T, W>(s.mean, s.invstd, w, b, g % P);
  }
};

// The normalize pass's value (norm_core.cu's NormalizePass).
template <class T>
struct NormalizeValue {
  const Normalize<T>* factors;
  NormShape shape;
  __device__ T operator()(int64_t i, T xi) const {
    return from_opmath<T>(cuda_math::normalize_with(to_opmath(xi), factors[shape.group_of(i)]));
  }
};

// The dx pass: dx[i] = value(i, dy[i], x[i]), one element or N at a time
// (16-byte vectors when aligned, ops/cuda/vectorized.cuh).
template <class T, class Value>
struct DxPass {
  T* dx;
  const T *dy, *x;
  Value value;
  __device__ void operator()(const Offsets<1>& o) const { scalar(o.v[0]); }
  __device__ void scalar(int64_t i) const { dx[i] = value(i, dy[i], x[i]); }
  template <int N>
  __device__ void vec(int64_t i0) const {
    const cuda_kernels::Vec<T, N> dyv = cuda_kernels::load_vec<T, N>(dy + i0), xv = cuda_kernels::load_vec<T, N>(x + i0);
    cuda_kernels::Vec<T, N> dxv;
#pragma unroll
    for (int k = 0; k < N; ++k) dxv.v[k] = value(i0 + k, dyv.v[k], xv.v[k]);
    cuda_kernels::store_vec<T, N>(dx + i0, dxv);
  }
};

// dx = dy * scale + (x - mean) * beta + gamma from the group's factors (K == 1,
// or no weight: the factors' scale is the element's).
template <class T>
struct BackwardValue {
  const Backward<T>* factors;
  NormShape shape;
  __device__ T operator()(int64_t i, T dyi, T xi) const {
    return from_opmath<T>(cuda_math::backward_with(to_opmath(dyi), to_opmath(xi), factors[shape.group_of(i)]));
  }
};

// K > 1 (LayerNorm, GroupNorm): a group spans channels of different weights,
// so scale = invstd * w is made per element (as backward_factors makes it: one
// double product, rounded) and mean, beta and gamma come from the group's
// factors: no division per element.
template <class T, class W>
struct WeightedBackwardValue {
  const Backward<T>* factors;
  const W* w;  // optional
  const double* invstd;
  NormShape shape;
  __device__ T operator()(int64_t i, T dyi, T xi) const {
    const int64_t g = shape.group_of(i);
    Backward<T> f = factors[g];
    if (w) f.scale = cuda_math::backward_scale<opmath_t<T>>(invstd[g], convert<double>(w[shape.channel_of(i)]));
    return from_opmath<T>(cuda_math::backward_with(to_opmath(dyi), to_opmath(xi), f));
  }
};

// The store of the row reduction of the w-weighted group sums (K > 1, or
// groups that are not channels) that also makes each group's dx factors:
// where a group has one weight (K == 1: BatchNorm without parameter
// gradients, InstanceNorm outside its fused kernels; channel g % P) with that
// weight, so the factors are whole (BackwardValue); where a group spans
// channels with weight 1 (WeightedBackwardValue puts the weight in per element).
template <class T, class Sums, class W>
struct SumsStore {
  Sums sums;  // norm_core.cu's GroupSumsStore
  const double *mean, *invstd;
  double count;
  Backward<T>* factors;
  const W* group_weight;  // K == 1: w (optional); else nullptr
  int64_t P;
  template <class Row, class S>
  __device__ void operator()(int64_t g, const Row& row, const S& s) const {
    sums(g, row, s);
    const double weight = group_weight ? convert<double>(group_weight[g % P]) : 1.0;
    factors[g] = cuda_math::backward_factors<opmath_t<T>>(mean[g], invstd[g], weight, true, s.dy, s.dy_xmu, count);
  }
};

// A buffer of G factors of type F (none for G == 0), for the launches that fill and read it.
template <class F>
struct Buffer {
  Buffer(int64_t groups, Device device)
      : tensor(groups > 0 ? cuda_kernels::temp_buffer(groups * static_cast<int64_t>(sizeof(F)), device) : Tensor()),
        data(groups > 0 ? static_cast<F*>(tensor.raw_data()) : nullptr) {}
  Tensor tensor;  // keep alive until the pass is enqueued (the cache reuses it in stream order)
  F* data;
};

// factors[g] = source.group_factors(g), a thread per group.
template <class Source, class F>
struct FromMemory {
  Source source;
  F* factors;
  __device__ void operator()(const Offsets<1>& o) const { factors[o.v[0]] = source.group_factors(o.v[0]); }
};

template <class F, class Source>
void launch_from_memory(const cuda_kernels::LaunchContext& ctx, int64_t groups, const Source& source, F* factors,
                        const char* op) {
  cuda_kernels::launch_elementwise(ctx, groups, cuda_kernels::linear(groups, op), FromMemory<Source, F>{source, factors},
                                   op);
}

}  // namespace minidl::norm::factors
