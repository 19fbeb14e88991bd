// Single-pass normalization forward (and backward dx, below) for
// ops/cuda/norm_core.cu: when a group is
// contiguous (A == 1: GroupNorm, InstanceNorm, LayerNorm) and has at most
// kFusedMaxGroup values, one block per group loads the group into registers
// once, reduces shifted double sums (ops/cuda/norm_math.h ShiftedSums), turns
// them into mean/invstd, and writes y from the registers: x is read once
// instead of twice (2 x 4 bytes per float element moved instead of 3 x 4), one
// launch instead of two, and the channel index is one IntDivider per element
// (j / S) instead of the general group_of/channel_of chain. Off under
// MINIDL_CUDA_NORM_KERNELS=legacy. No __restrict__: y may alias x (each
// block reads its whole group before writing it). Checked against the CPU
// kernels on an H100 (tests/test_cuda_ops, test_cuda_ops_half, 2026-11-27;
// the per-size register arrays, with_items_for, in the run C rerun of both:
// bench/RESULTS.md).
#pragma once

#include <cub/block/block_reduce.cuh>

#include <type_traits>

#include "minidl/ops/cuda/norm_stats.cuh"

namespace minidl::norm::fused {

using cuda_math::NormShape;
using cuda_math::ShiftedSums;
using cuda_math::opmath_t;
using cuda_math::to_opmath;

inline constexpr int kFusedThreads = 256;
inline constexpr int kFusedItems = 16;  // values per thread held in registers, at most
inline constexpr int64_t kFusedMaxGroup = int64_t{kFusedThreads} * kFusedItems;

// The register arrays sized to the group (4, 8 or 16 values a thread), so
// small groups (InstanceNorm's 32x32 planes: 1024 values) do not hold
// registers for 16 and more blocks fit on a multiprocessor.
template <class Launch>
void with_items_for(int64_t group_size, const Launch& launch) {
  if (group_size <= int64_t{kFusedThreads} * 4) launch(std::integral_constant<int, 4>());
  else if (group_size <= int64_t{kFusedThreads} * 8) launch(std::integral_constant<int, 8>());
  else launch(std::integral_constant<int, kFusedItems>());
}

inline bool fused_forward_applies(const NormShape& s) {
  return !stats::legacy_kernels() && s.fast && s.A == 1 && s.group_size() > 0 && s.group_size() <= kFusedMaxGroup;
}

template <int kItems, class T, class W>
__global__ void __launch_bounds__(kFusedThreads)
    fused_forward_kernel(T* y, const T* x, const W* w,
                         const W* b, stats::StatsStore out, NormShape shape) {
  using C = opmath_t<T>;
  using BlockReduce = cub::BlockReduce<ShiftedSums, kFusedThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  __shared__ double s_mean, s_invstd;
  const int64_t M = shape.group_size();
  const int m = static_cast<int>(M);  // <= kFusedMaxGroup
  for (int64_t g = blockIdx.x; g < shape.G; g += gridDim.x) {
    const T* xg = x + g * M;
    const double shift = convert<double>(xg[0]);
    T v[kItems];
    ShiftedSums acc;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
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
    for (int i = 0; i < kItems; ++i) {
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
  with_items_for(shape.group_size(), [&](auto items) {
    fused_forward_kernel<decltype(items)::value, T, W><<<blocks, kFusedThreads, 0, ctx.stream>>>(y, x, w, b, out, shape);
  });
  MINIDL_CUDA_KERNEL_LAUNCH_CHECK("normalization");
}

// ---- backward: dx of a batch-statistics group in one read of x and dy ----
// One block per contiguous group (A == 1, <= kFusedMaxGroup values): the
// group's dy and x stay in registers while the block reduces sum w dy and
// sum w dy (x - mean), then dx is written from them: 2 reads + 1 write per
// element instead of 4 reads + 1 write, one launch instead of two. Where
// every channel's share of a group is a multiple of the block
// (fused_param_sums_apply: GroupNorm and InstanceNorm on planes of 256, 512,
// ... values) the block also sums each channel's part of its group, sum dy
// and sum dy (x - mean) invstd, into `partial` (G x K), and a small reduction
// over the samples makes the parameter gradients: no pass of their own over
// dy and x (on an H100 it took 51 of GroupNorm(32)'s 143 us forward + backward
// on (128, 64, 32, 32), 2026-11-27).
struct DyPair {
  double dy = 0, dy_xmu = 0;
};

struct AddDyPair {
  __device__ DyPair operator()(const DyPair& a, const DyPair& b) const { return DyPair{a.dy + b.dy, a.dy_xmu + b.dy_xmu}; }
};

inline bool fused_backward_applies(const NormShape& s) { return fused_forward_applies(s); }

// Item i of every thread then lies in channel i / (S / kFusedThreads) of the
// group, the same for the whole block, so a channel's sums are block sums.
inline bool fused_param_sums_apply(const NormShape& s) {
  return fused_backward_applies(s) && s.S % kFusedThreads == 0;
}

// kParamSums: with `partial`, an instantiation of its own. One kernel for
// both (a run-time check of `partial`) compiled to 2.3x the plain kernel's
// instructions (1080 against 470 PTX instructions at 4 values a thread) and
// InstanceNorm's step, which has no parameters, went 0.075 -> 0.099 ms on an
// H100 (2026-11-27); kParamSums = false is the plain kernel's code again (the
// same 470 instructions and 46 registers; not re-timed on a GPU).
template <int kItems, bool kParamSums, class T, class W>
__global__ void __launch_bounds__(kFusedThreads)
    fused_backward_kernel(T* dx, const T* dy, const T* x,
                          const W* w, const double* mean, const double* invstd, double* s1, double* s2,
                          DyPair* partial, int items_per_channel, NormShape shape) {
  using BlockReduce = cub::BlockReduce<DyPair, kFusedThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  __shared__ double s_dy, s_dy_xmu;
  const int64_t M = shape.group_size();
  const int m = static_cast<int>(M);
  for (int64_t g = blockIdx.x; g < shape.G; g += gridDim.x) {
    const T* xg = x + g * M;
    const T* dyg = dy + g * M;
    const double mg = mean[g], ig = invstd[g];
    const int64_t c0 = static_cast<int64_t>(shape.by_P.mod(static_cast<uint32_t>(g))) * shape.K;
    T vx[kItems], vdy[kItems];
    DyPair acc, channel;  // channel: this thread's share of the current channel's sums (kParamSums)
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int j = threadIdx.x + i * kFusedThreads;
      if (j < m) {
        vx[i] = xg[j];
        vdy[i] = dyg[j];
        const double d = convert<double>(vdy[i]), xmu = convert<double>(vx[i]) - mg;
        const double wd = d * (w ? convert<double>(w[c0 + shape.by_S.div(static_cast<uint32_t>(j))]) : 1.0);
        acc.dy += wd;
        acc.dy_xmu += wd * xmu;
        if constexpr (kParamSums) channel = DyPair{channel.dy + d, channel.dy_xmu + d * xmu * ig};
      }
      if constexpr (kParamSums) {
        // A uniform branch (fused_param_sums_apply): the channel's last item is in.
        if (i * kFusedThreads < m && (i + 1) % items_per_channel == 0) {
          const DyPair sums = BlockReduce(temp).Reduce(channel, AddDyPair());
          if (threadIdx.x == 0) partial[g * shape.K + i / items_per_channel] = sums;
          channel = DyPair{};
          __syncthreads();  // temp is reused
        }
      }
    }
    const DyPair total = BlockReduce(temp).Reduce(acc, AddDyPair());
    if (threadIdx.x == 0) {
      s_dy = total.dy;
      s_dy_xmu = total.dy_xmu;
      if (s1) s1[g] = total.dy;
      if (s2) s2[g] = total.dy_xmu;
    }
    __syncthreads();
    const double sdy = s_dy, sdx = s_dy_xmu, count = static_cast<double>(M);
    T* dxg = dx + g * M;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int j = threadIdx.x + i * kFusedThreads;
      if (j < m) {
        const double wc = w ? convert<double>(w[c0 + shape.by_S.div(static_cast<uint32_t>(j))]) : 1.0;
        dxg[j] = cuda_math::norm_backward_value_stored<T>(vdy[i], vx[i], mg, ig, wc, true, sdy, sdx, count);
      }
    }
    __syncthreads();
  }
}

template <class T, class W>
void launch_fused_backward(const cuda_kernels::LaunchContext& ctx, const NormShape& shape, T* dx, const T* dy,
                           const T* x, const W* w, const double* mean, const double* invstd, double* s1,
                           double* s2, DyPair* partial = nullptr) {
  const int blocks = static_cast<int>(shape.G < cuda_kernels::kMaxBlocks ? shape.G : cuda_kernels::kMaxBlocks);
  const int items_per_channel = static_cast<int>(shape.S >= kFusedThreads ? shape.S / kFusedThreads : 1);  // with partial
  with_items_for(shape.group_size(), [&](auto items) {
    constexpr int kItems = decltype(items)::value;
    if (partial)
      fused_backward_kernel<kItems, true, T, W><<<blocks, kFusedThreads, 0, ctx.stream>>>(
          dx, dy, x, w, mean, invstd, s1, s2, partial, items_per_channel, shape);
    else
      fused_backward_kernel<kItems, false, T, W><<<blocks, kFusedThreads, 0, ctx.stream>>>(
          dx, dy, x, w, mean, invstd, s1, s2, nullptr, items_per_channel, shape);
  });
  MINIDL_CUDA_KERNEL_LAUNCH_CHECK("normalization backward");
}

}  // namespace minidl::norm::fused
