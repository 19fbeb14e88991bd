// CUDA kernels of SyncBatchNorm's building blocks (ops/batch_norm_sync.h):
// the count-weighted merge of the ranks' statistics with the running-stats
// update (a thread per channel, ranks in order, double), and the backward's
// weighted sums and total count (kept on the device for the norm core's
// backward). Empty ranks get zero weight in the kernel; the host never
// reads device memory. Math in ops/cuda/norm_math.h (sync_gather_channel,
// sync_weighted_sum), shared with the CPU tests. Running statistics and weight
// may be float32, float64, float16 or bfloat16 (PyTorch's dispatch on the
// running_mean's dtype; a 16-bit input with 16-bit or float32 parameters).
// Checked against the CPU kernels on an H100: float32/float64 (tests/test_cuda_ops,
// 2026-11-26), float16/bfloat16 with float32 or 16-bit parameters
// (tests/test_cuda_ops_half, 2026-11-27; their math also on the CPU:
// tests/test_batch_norm_sync_kernels).
#include "minidl/ops/batch_norm_sync.h"
#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/cuda/norm_math.h"

namespace minidl {

namespace {

using cuda_kernels::LaunchContext;
using cuda_kernels::linear;
using cuda_math::Offsets;


template <class T>
struct GatherStats {
  const double *means, *invstds, *counts;
  double *mean, *invstd;
  T *running_mean, *running_var;  // optional (both or neither)
  int64_t W, C;
  double momentum, eps;
  __device__ void operator()(const Offsets<1>& o) const {
    cuda_math::sync_gather_channel(counts, means, invstds, W, C, o.v[0], eps, momentum, mean, invstd, running_mean,
                                   running_var);
  }
};

template <class T>
void gather_stats_typed(const BatchNormGatherStatsArgs& a) {
  const LaunchContext ctx(a.means.device());
  const int64_t W = a.means.size(0), C = a.means.size(1);
  const bool running = a.running_mean.defined();
  cuda_kernels::launch_elementwise(
      ctx, C, linear(C, "batch_norm_gather_stats_with_counts"),
      GatherStats<T>{a.means.data_ptr<double>(), a.invstds.data_ptr<double>(), a.counts.data_ptr<double>(),
                     a.mean.data_ptr<double>(), a.invstd.data_ptr<double>(),
                     running ? a.running_mean.data_ptr<T>() : nullptr, running ? a.running_var.data_ptr<T>() : nullptr,
                     W, C, a.momentum, a.eps},
      "batch_norm_gather_stats_with_counts");
}

void batch_norm_gather_stats_cuda(const BatchNormGatherStatsArgs& a) {
  if (!a.running_mean.defined()) return gather_stats_typed<double>(a);  // T unused without running stats
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(a.running_mean.dtype(), "batch_norm_gather_stats_with_counts",
                                         [&] { gather_stats_typed<scalar_t>(a); });
}

template <class T>
struct WeighSums {
  const double *s1, *s2;
  const T* w;  // optional
  double *o1, *o2;
  __device__ void operator()(const Offsets<1>& o) const {
    const int64_t c = o.v[0];
    o1[c] = cuda_math::sync_weighted_sum(s1[c], w, c);
    o2[c] = cuda_math::sync_weighted_sum(s2[c], w, c);
  }
};

struct TotalCount {  // one thread: the counts summed in rank order
  const double* counts;
  int64_t W;
  double* total;
  __device__ void operator()(const Offsets<1>&) const {
    double t = 0;
    for (int64_t k = 0; k < W; ++k) t += counts[k];
    *total = t;
  }
};

template <class T>
void backward_sums_typed(const BatchNormBackwardSumsArgs& a) {
  const LaunchContext ctx(a.sum_dy.device());
  const int64_t C = a.sum_dy.numel();
  cuda_kernels::launch_elementwise(
      ctx, C, linear(C, "batch_norm_backward_elemt"),
      WeighSums<T>{a.sum_dy.data_ptr<double>(), a.sum_dy_xmu.data_ptr<double>(),
                   a.weight.defined() ? a.weight.data_ptr<T>() : nullptr, a.weighted_sum_dy.data_ptr<double>(),
                   a.weighted_sum_dy_xmu.data_ptr<double>()},
      "batch_norm_backward_elemt");
  cuda_kernels::launch_elementwise(ctx, 1, linear(1, "batch_norm_backward_elemt"),
                                   TotalCount{a.counts.data_ptr<double>(), a.counts.numel(), a.total.data_ptr<double>()},
                                   "batch_norm_backward_elemt");
}

void batch_norm_backward_sums_cuda(const BatchNormBackwardSumsArgs& a) {
  if (!a.weight.defined()) return backward_sums_typed<double>(a);
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(a.weight.dtype(), "batch_norm_backward_elemt",
                                         [&] { backward_sums_typed<scalar_t>(a); });
}

}  // namespace

void register_batch_norm_sync_cuda_kernels() {
  batch_norm_gather_stats_stub.set(DeviceType::CUDA, batch_norm_gather_stats_cuda);
  batch_norm_backward_sums_stub.set(DeviceType::CUDA, batch_norm_backward_sums_cuda);
}

}  // namespace minidl
