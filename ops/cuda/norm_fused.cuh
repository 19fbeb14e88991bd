// Single-pass normalization forward for ops/cuda/norm_core.cu: when a group is
// contiguous (A == 1: GroupNorm, InstanceNorm, LayerNorm) and has at most
// kFusedMaxGroup values, one block per group loads the group into registers
// once, reduces shifted double sums (ops/cuda/norm_math.h ShiftedSums), turns
// them into mean/invstd, and writes y from the registers: x is read once
// instead of twice (2 x 4 bytes per float element moved instead of 3 x 4), one
// launch instead of two, and the channel index is one IntDivider per element
// (j / S) instead of the general group_of/channel_of chain. Off under
// MINIDL_CUDA_NORM_KERNELS=legacy. Compiled, not run on a GPU (2026-11-26).
#pragma once

#include <cub/block/block_reduce.cuh>

#include "minidl/ops/cuda/norm_stats.cuh"

namespace minidl::norm::fused {

using cuda_math::NormShape;
using cuda_math::ShiftedSums;
using cuda_math::opmath_t;
using cuda_math::to_opmath;

inline constexpr int kFusedThreads = 256;
inline constexpr int kFusedItems = 16;  // values per thread held in registers
inline constexpr int64_t kFusedMaxGroup = int64_t{kFusedThreads} * kFusedItems;

inline bool fused_forward_applies(const NormShape& s) {
  return !stats::legacy_kernels() && s.fast && s.A == 1 && s.group_size() > 0 && s.group_size() <= kFusedMaxGroup;
}

template <class T, class W>
__global__ void __launch_bounds__(kFusedThreads)
    fused_forward_kernel(T* __restrict__ y, const T* __restrict__ x, const W* __restrict__ w,
                         const W* __restrict__ b, stats::StatsStore out, NormShape shape) {
  using C = opmath_t<T>;
  using BlockReduce = cub::BlockReduce<ShiftedSums, kFusedThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  __shared__ double s_mean, s_invstd;
  const int64_t M = shape.group_size();
  const int m = static_cast<int>(M);  // <= kFusedMaxGroup
  for (int64_t g = blockIdx.x; g < shape.G; g += gridDim.x) {
    const T* xg = x + g * M;
    const double shift = convert<double>(xg[0]);
    T v[kFusedItems];
    ShiftedSums acc;
#pragma unroll
    for (int i = 0; i < kFusedItems; ++i) {
      const int j = threadIdx.x + i * kFusedThreads;
      if (j < m) {
        v[i] = xg[j];
        acc = cuda_math::shifted_add(acc, cuda_math::shifted_of(convert<double>(v[i]), shift));
      }
    }
    const ShiftedSums total = BlockReduce(temp).Reduce(acc, stats::ShiftedAdd());
    if (threadIdx.x == 0) {
      const cuda_math::Welford wf = cuda_math::welford_from_shifted(total, static_cast<double>(M), shift);
      out.store(g, wf);
      const cuda_math::GroupStatistics st = cuda_math::statistics_of(wf, out.eps);
      s_mean = st.mean;
      s_invstd = st.invstd;
    }
    __syncthreads();
    const double mean = s_mean, invstd = s_invstd;
    const int64_t c0 = static_cast<int64_t>(shape.by_P.mod(static_cast<uint32_t>(g))) * shape.K;
    T* yg = y + g * M;
#pragma unroll
    for (int i = 0; i < kFusedItems; ++i) {
      const int j = threadIdx.x + i * kFusedThreads;
      if (j < m) {
        const int64_t c = c0 + shape.by_S.div(static_cast<uint32_t>(j));
        yg[j] = cuda_math::normalize_value_stored<T>(v[i], mean, invstd, w ? convert<double>(w[c]) : 1.0,
                                                     b ? static_cast<C>(to_opmath(b[c])) : C(0));
      }
    }
    __syncthreads();  // temp, s_mean and s_invstd are reused by the next group
  }
}

template <class T, class W>
void launch_fused_forward(const cuda_kernels::LaunchContext& ctx, const NormShape& shape, T* y, const T* x,
                          const W* w, const W* b, const stats::StatsStore& out) {
  const int blocks = static_cast<int>(shape.G < cuda_kernels::kMaxBlocks ? shape.G : cuda_kernels::kMaxBlocks);
  fused_forward_kernel<T, W><<<blocks, kFusedThreads, 0, ctx.stream>>>(y, x, w, b, out, shape);
  MINIDL_CUDA_KERNEL_LAUNCH_CHECK("normalization");
}

}  // namespace minidl::norm::fused
