// CPU kernels of ops/batch_norm_sync.h (the formulas are in the header): one
// pass over the (W, C) gathered statistics per channel, in double, ranks in
// order, so the result is the same bit for bit whatever the thread count.
// W and C are small (world size, channels): no threads. Running statistics
// and weight may be float32, float64, float16 or bfloat16.
#include <cmath>
#include <vector>

#include "minidl/core/dtype.h"
#include "minidl/core/half.h"
#include "minidl/ops/batch_norm_sync.h"

namespace minidl {

namespace {

// float32, float64, float16 and bfloat16 (running statistics, weights: PyTorch
// dispatches these on the running_mean's / weight's dtype, 16-bit included).
template <class F>
void dispatch_floating_and_half(DType dtype, const char* op, F&& f) {
  if (dtype == kBFloat16) return f(BFloat16{});
  if (dtype == kFloat16) return f(Half{});
  MINIDL_DISPATCH_FLOATING(dtype, op, [&] { f(scalar_t{}); });
}

// Updated in double, rounded once to T (16-bit: through float32, as every conversion).
template <class T>
void update_running_typed(const Tensor& running, const double* batch, int64_t C, double momentum,
                          const double* n) {
  T* r = static_cast<T*>(running.raw_data());
  for (int64_t c = 0; c < C; ++c)
    if (n[c] > 0) r[c] = convert<T>((1.0 - momentum) * convert<double>(r[c]) + momentum * batch[c]);
}

void batch_norm_gather_stats_cpu(const BatchNormGatherStatsArgs& a) {
  const int64_t W = a.means.size(0), C = a.means.size(1);
  const double* m = a.means.data_ptr<double>();
  const double* is = a.invstds.data_ptr<double>();
  const double* cnt = a.counts.data_ptr<double>();
  double* mean = a.mean.data_ptr<double>();
  double* invstd = a.invstd.data_ptr<double>();
  std::vector<double> unbiased(static_cast<size_t>(C)), total(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    double n = 0, avg = 0, var_n = 0;
    for (int64_t w = 0; w < W; ++w) {
      const double nk = cnt[w];
      if (nk < 1) continue;  // an empty rank: zero weight (its invstd 0 would make inf * 0)
      const double mk = m[w * C + c];
      const double sd = 1.0 / is[w * C + c];
      const double vk = (sd * sd - a.eps) * nk;
      const double factor = 1.0 / (n + nk);
      var_n += vk + (avg - mk) * (avg - mk) * n * nk * factor;
      avg = n * factor * avg + nk * factor * mk;
      n += nk;
    }
    mean[c] = avg;
    invstd[c] = n > 0 ? 1.0 / std::sqrt(var_n / n + a.eps) : 0.0;
    unbiased[c] = var_n / (n - 1);
    total[c] = n;
  }
  if (!a.running_mean.defined()) return;
  dispatch_floating_and_half(a.running_mean.dtype(), "batch_norm_gather_stats_with_counts", [&](auto tag) {
    using T = decltype(tag);
    update_running_typed<T>(a.running_mean, mean, C, a.momentum, total.data());
    update_running_typed<T>(a.running_var, unbiased.data(), C, a.momentum, total.data());
  });
}

template <class T>
void weigh_sums(const BatchNormBackwardSumsArgs& a) {
  const int64_t C = a.sum_dy.numel();
  const double* s1 = a.sum_dy.data_ptr<double>();
  const double* s2 = a.sum_dy_xmu.data_ptr<double>();
  const T* w = a.weight.defined() ? static_cast<const T*>(a.weight.raw_data()) : nullptr;
  double* o1 = a.weighted_sum_dy.data_ptr<double>();
  double* o2 = a.weighted_sum_dy_xmu.data_ptr<double>();
  for (int64_t c = 0; c < C; ++c) {
    o1[c] = w ? s1[c] * convert<double>(w[c]) : s1[c];
    o2[c] = w ? s2[c] * convert<double>(w[c]) : s2[c];
  }
}

void batch_norm_backward_sums_cpu(const BatchNormBackwardSumsArgs& a) {
  if (a.weight.defined()) {
    dispatch_floating_and_half(a.weight.dtype(), "batch_norm_backward_elemt",
                               [&](auto tag) { weigh_sums<decltype(tag)>(a); });
  } else {
    weigh_sums<double>(a);
  }
  const double* cnt = a.counts.data_ptr<double>();
  double total = 0;
  for (int64_t k = 0; k < a.counts.numel(); ++k) total += cnt[k];
  a.total.data_ptr<double>()[0] = total;
}

}  // namespace

void register_batch_norm_sync_cpu_kernels() {
  batch_norm_gather_stats_stub.set(DeviceType::CPU, batch_norm_gather_stats_cpu);
  batch_norm_backward_sums_stub.set(DeviceType::CPU, batch_norm_backward_sums_cpu);
}

}  // namespace minidl
