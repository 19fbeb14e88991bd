// Normalization over float16/bfloat16 input read and written directly: the
// case autocast gives (BatchNorm keeps float32 parameters; PyTorch's CPU
// batch_norm, group_norm and layer_norm take a bfloat16 input with float32
// parameters the same way), and 16-bit parameters for GroupNorm, LayerNorm
// and InstanceNorm (a model cast to bfloat16 whole). The float32 kernel of
// ops/cpu/norm_core.cpp on whole-tensor float32 copies cost a SmallNet
// bfloat16 step about 4% (the copies, their memory, and the copies' page
// faults); here each row is converted to float32 into a per-thread buffer of
// one row, the same row loops (ops/cpu/norm_rows.h) run on it in the same
// order and with the same schedule, and results are rounded once into the
// 16-bit output. The results are the bits the widened path gives
// (tests/test_bf16_native_ops).
//   BatchNorm (A images, K = 1, planes of S > 1 values), float32 or no
//   parameters; a row is one image's plane of one channel:
//     statistics: per row exact two-pass moments in double, merged per
//                 channel in row order (Chan); normalize in float32, rounded once
//     backward:   per row double sums of dy and dy (x - mean), added per
//                 channel in row order; dx in float32, rounded once; dw, db float32
//   GroupNorm, LayerNorm, InstanceNorm (A = 1): a row is one group's K*S
//   values; 16-bit parameters are widened once (C values), 16-bit parameter
//   gradients are the float32 ones rounded once (as the widened path did):
//     statistics: the row's exact two-pass moments; normalize in float32
//     backward:   the row's double sums, per-thread double weight/bias sums
//                 added in thread order (the float32 kernel's schedule)
// Other cases ((N, C) BatchNorm input, 16-bit BatchNorm parameters,
// SyncBatchNorm's given or returned sums) return false.
#include "minidl/ops/cpu/norm_core_half.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "minidl/core/half.h"
#include "minidl/ops/cpu/convert_half.h"
#include "minidl/ops/cpu/norm_rows.h"

namespace minidl::norm {

namespace {

using namespace rows;

bool is_float32_or_none(const Tensor& t) { return !t.defined() || t.dtype() == kFloat32; }

// One row of 16-bit values as float32, and back (the vectorized conversions).
template <class T>
void widen(const T* in, float* out, int64_t n) {
  if constexpr (std::is_same_v<T, BFloat16>) half_convert_kernels().bf16_to_f32(in, out, n);
  else half_convert_kernels().f16_to_f32(in, out, n);
}
template <class T>
void narrow(const float* in, T* out, int64_t n) {
  if constexpr (std::is_same_v<T, BFloat16>) half_convert_kernels().f32_to_bf16(in, out, n);
  else half_convert_kernels().f32_to_f16(in, out, n);
}

// Per-thread row buffers: one BatchNorm plane, or one group's K*S values
// (GroupNorm(32) on 128 channels of 32x32: 4096 floats).
float* row_buffer(int which, int64_t n) {
  thread_local std::vector<float> buffers[3];
  std::vector<float>& b = buffers[which];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return b.data();
}

const float* data_or_null(const Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

template <class T>
void forward_kernel(const NormForwardArgs& args) {
  const NormGeometry& geo = args.geo;
  const T* x = static_cast<const T*>(args.input.raw_data());
  T* y = args.output.defined() ? static_cast<T*>(args.output.raw_data()) : nullptr;
  const float* w = data_or_null(args.weight);
  const float* b = data_or_null(args.bias);
  double* mean_out = args.mean.data_ptr<double>();
  double* invstd_out = args.invstd.data_ptr<double>();
  double* var_out = args.var.defined() ? args.var.data_ptr<double>() : nullptr;
  const int64_t G = geo.G, S = geo.S, rows = geo.A * G;
  const bool parallel = geo.numel() >= kParallelMin;

  if (args.use_input_stats) {
    std::vector<double> part_mean(static_cast<size_t>(rows)), part_m2(static_cast<size_t>(rows));
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t r = 0; r < rows; ++r) {
      float* xr = row_buffer(0, S);
      widen(x + r * S, xr, S);
      Moments m;
      add_run(m, xr, S);
      part_mean[r] = m.mean;
      part_m2[r] = m.m2;
    }
    for (int64_t g = 0; g < G; ++g) {
      Moments m;
      for (int64_t a = 0; a < geo.A; ++a) m.merge(static_cast<double>(S), part_mean[a * G + g], part_m2[a * G + g]);
      const double var = m.m2 / m.n;
      mean_out[g] = m.mean;
      invstd_out[g] = 1.0 / std::sqrt(var + args.eps);
      if (var_out) var_out[g] = var;
    }
  }
  if (!y) return;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = r % G;
    float* xr = row_buffer(0, S);
    float* yr = row_buffer(1, S);
    widen(x + r * S, xr, S);
    normalize_row(xr, yr, 1, S, g % geo.P, w, b, mean_out[g], invstd_out[g]);
    narrow(yr, y + r * S, S);
  }
}

template <class T>
void backward_kernel(const NormBackwardArgs& args) {
  const NormGeometry& geo = args.geo;
  const T* dy = static_cast<const T*>(args.grad_out.raw_data());
  const T* x = static_cast<const T*>(args.input.raw_data());
  const float* w = data_or_null(args.weight);
  T* dx = args.grad_input.defined() ? static_cast<T*>(args.grad_input.raw_data()) : nullptr;
  float* dw = args.grad_weight.defined() ? args.grad_weight.data_ptr<float>() : nullptr;
  float* db = args.grad_bias.defined() ? args.grad_bias.data_ptr<float>() : nullptr;
  const double* means = args.mean.data_ptr<double>();
  const double* invstds = args.invstd.data_ptr<double>();
  const bool want_params = dw || db;
  const bool reduce = want_params || (dx && args.batch_stats);
  const double count = static_cast<double>(geo.group_size());
  const int64_t G = geo.G, S = geo.S, rows = geo.A * G, C = geo.channels();
  const bool parallel = geo.numel() >= kParallelMin;

  std::vector<double> sum1(static_cast<size_t>(G), 0.0), sum2(static_cast<size_t>(G), 0.0);
  if (reduce) {
    std::vector<double> part_sd(static_cast<size_t>(rows), 0.0), part_sdx(static_cast<size_t>(rows), 0.0);
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t g = r % G;
      float* dyr = row_buffer(0, S);
      float* xr = row_buffer(1, S);
      widen(dy + r * S, dyr, S);
      widen(x + r * S, xr, S);
      reduce_row<float>(dyr, xr, 1, S, 0, nullptr, means[g], invstds[g], nullptr, nullptr, part_sd[r], part_sdx[r]);
    }
    std::vector<double> acc_w(want_params ? static_cast<size_t>(C) : 0, 0.0), acc_b(acc_w.size(), 0.0);
    for (int64_t g = 0; g < G; ++g) {
      double sd = 0, sdx = 0;
      for (int64_t a = 0; a < geo.A; ++a) sd += part_sd[a * G + g], sdx += part_sdx[a * G + g];
      const double wc = w ? static_cast<double>(w[g % geo.P]) : 1.0;
      sum1[g] = wc * sd;
      sum2[g] = wc * sdx;
      if (want_params) {
        acc_w[g % geo.P] += sdx * invstds[g];
        acc_b[g % geo.P] += sd;
      }
    }
    for (int64_t c = 0; c < C && want_params; ++c) {
      if (dw) dw[c] = static_cast<float>(acc_w[c]);
      if (db) db[c] = static_cast<float>(acc_b[c]);
    }
  }
  if (!dx) return;
  std::vector<double> beta(static_cast<size_t>(G), 0.0), gamma(static_cast<size_t>(G), 0.0);
  if (args.batch_stats)
    for (int64_t g = 0; g < G; ++g) {
      const double invstd = invstds[g];
      beta[g] = -invstd * invstd * invstd * sum2[g] / count;
      gamma[g] = -invstd * sum1[g] / count;
    }
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = r % G;
    float* dyr = row_buffer(0, S);
    float* xr = row_buffer(1, S);
    float* dxr = row_buffer(2, S);
    widen(dy + r * S, dyr, S);
    widen(x + r * S, xr, S);
    elemt_row(dyr, xr, dxr, 1, S, g % geo.P, w, means[g], invstds[g], beta[g], gamma[g]);
    narrow(dxr, dx + r * S, S);
  }
}

// ---- A = 1: GroupNorm, LayerNorm, InstanceNorm ------------------------------

// A parameter as float32: the tensor's own data, or a widened copy of it.
struct FloatParam {
  std::vector<float> copy;
  const float* data = nullptr;
  explicit FloatParam(const Tensor& t) {
    if (!t.defined()) return;
    if (t.dtype() == kFloat32) {
      data = t.data_ptr<float>();
      return;
    }
    copy.resize(static_cast<size_t>(t.numel()));
    if (t.dtype() == kBFloat16) widen(static_cast<const BFloat16*>(t.raw_data()), copy.data(), t.numel());
    else widen(static_cast<const Half*>(t.raw_data()), copy.data(), t.numel());
    data = copy.data();
  }
};

// out (float32, or 16-bit rounded once) = values.
void write_param_grad(const Tensor& out, const float* values) {
  const int64_t n = out.numel();
  if (out.dtype() == kFloat32) std::copy(values, values + n, out.data_ptr<float>());
  else if (out.dtype() == kBFloat16) narrow(values, static_cast<BFloat16*>(out.raw_data()), n);
  else narrow(values, static_cast<Half*>(out.raw_data()), n);
}

template <class T>
void forward_groups_kernel(const NormForwardArgs& args) {
  const NormGeometry& geo = args.geo;
  const T* x = static_cast<const T*>(args.input.raw_data());
  T* y = args.output.defined() ? static_cast<T*>(args.output.raw_data()) : nullptr;
  const FloatParam w(args.weight), b(args.bias);
  double* mean_out = args.mean.data_ptr<double>();
  double* invstd_out = args.invstd.data_ptr<double>();
  double* var_out = args.var.defined() ? args.var.data_ptr<double>() : nullptr;
  const int64_t G = geo.G, K = geo.K, S = geo.S, run = K * S;
  const bool parallel = geo.numel() >= kParallelMin;

#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t g = 0; g < G; ++g) {
    float* xr = row_buffer(0, run);
    widen(x + g * run, xr, run);
    if (args.use_input_stats) {
      Moments m;
      add_run(m, xr, run);
      const double var = m.n == 0 ? 0.0 : m.m2 / m.n;  // no values: report zeros, as the float32 kernel
      mean_out[g] = m.mean;
      invstd_out[g] = m.n == 0 ? 0.0 : 1.0 / std::sqrt(var + args.eps);
      if (var_out) var_out[g] = var;
    }
    if (!y) continue;
    float* yr = row_buffer(1, run);
    // The float32 kernel's pieces: a piece of one value takes normalize_row's other branch.
    last_chunk_first(K, S, [&](int64_t k0, int64_t k1) {
      normalize_row(xr + k0 * S, yr + k0 * S, k1 - k0, S, (g % geo.P) * K + k0, w.data, b.data, mean_out[g],
                    invstd_out[g]);
    });
    narrow(yr, y + g * run, run);
  }
}

template <class T>
void backward_groups_kernel(const NormBackwardArgs& args) {
  const NormGeometry& geo = args.geo;
  const T* dy = static_cast<const T*>(args.grad_out.raw_data());
  const T* x = static_cast<const T*>(args.input.raw_data());
  const FloatParam wp(args.weight);
  const float* w = wp.data;
  T* dx = args.grad_input.defined() ? static_cast<T*>(args.grad_input.raw_data()) : nullptr;
  const double* means = args.mean.data_ptr<double>();
  const double* invstds = args.invstd.data_ptr<double>();
  const bool want_params = args.grad_weight.defined() || args.grad_bias.defined();
  const bool reduce = want_params || (dx && args.batch_stats);
  const double count = static_cast<double>(geo.group_size());
  const int64_t G = geo.G, K = geo.K, S = geo.S, run = K * S, C = geo.channels();
  const bool parallel = geo.numel() >= kParallelMin;
  const int threads = parallel ? omp_get_max_threads() : 1;

  std::vector<double> acc(want_params ? static_cast<size_t>(2 * C * threads) : 0, 0.0);  // [acc_w | acc_b] per thread
#pragma omp parallel num_threads(threads) if (parallel)
  {
    double* acc_w = want_params ? acc.data() + 2 * C * omp_get_thread_num() : nullptr;
    double* acc_b = want_params ? acc_w + C : nullptr;
#pragma omp for schedule(static)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t c0 = (g % geo.P) * K;
      float* dyr = row_buffer(0, run);
      float* xr = row_buffer(1, run);
      widen(dy + g * run, dyr, run);
      widen(x + g * run, xr, run);
      double s1 = 0, s2 = 0;
      if (reduce) reduce_row(dyr, xr, K, S, c0, w, means[g], invstds[g], acc_w, acc_b, s1, s2);
      if (!dx) continue;
      double beta = 0, gamma = 0;
      if (args.batch_stats) {
        const double invstd = invstds[g];
        beta = -invstd * invstd * invstd * s2 / count;
        gamma = -invstd * s1 / count;
      }
      float* dxr = row_buffer(2, run);
      last_chunk_first(K, S, [&](int64_t k0, int64_t k1) {
        elemt_row(dyr + k0 * S, xr + k0 * S, dxr + k0 * S, k1 - k0, S, c0 + k0, w, means[g], invstds[g], beta,
                  gamma);
      });
      narrow(dxr, dx + g * run, run);
    }
  }
  if (!want_params) return;
  std::vector<float> dw(static_cast<size_t>(C)), db(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    double sw = 0, sb = 0;
    for (int t = 0; t < threads; ++t) {
      sw += acc[static_cast<size_t>(2 * C * t + c)];
      sb += acc[static_cast<size_t>(2 * C * t + C + c)];
    }
    dw[c] = static_cast<float>(sw);
    db[c] = static_cast<float>(sb);
  }
  if (args.grad_weight.defined()) write_param_grad(args.grad_weight, dw.data());
  if (args.grad_bias.defined()) write_param_grad(args.grad_bias, db.data());
}

// BatchNorm geometry over planes of more than one value (A images, K = 1).
bool batch_norm_planes(const NormGeometry& geo) { return geo.A > 1 && geo.K == 1 && geo.S > 1; }

template <class F>
bool with_half(DType d, F&& f) {
  if (d == kBFloat16) return f(BFloat16{}), true;
  if (d == kFloat16) return f(Half{}), true;
  return false;
}

// float32, the input's 16-bit dtype, or undefined.
bool float32_or(const Tensor& t, DType d) { return !t.defined() || t.dtype() == kFloat32 || t.dtype() == d; }

}  // namespace

bool forward_half_cpu(const NormForwardArgs& args) {
  const DType d = args.input.dtype();
  if (!is_reduced_floating(d) || (args.output.defined() && args.output.dtype() != d)) return false;
  if (args.geo.A == 1 && float32_or(args.weight, d) && float32_or(args.bias, d))
    return with_half(d, [&](auto tag) { forward_groups_kernel<decltype(tag)>(args); });
  if (!batch_norm_planes(args.geo) || !is_float32_or_none(args.weight) || !is_float32_or_none(args.bias))
    return false;
  if (args.use_input_stats && args.geo.group_size() == 0) return false;
  return with_half(d, [&](auto tag) { forward_kernel<decltype(tag)>(args); });
}

bool backward_half_cpu(const NormBackwardArgs& args) {
  const DType d = args.input.dtype();
  if (!is_reduced_floating(d) || args.grad_out.dtype() != d ||
      (args.grad_input.defined() && args.grad_input.dtype() != d) || args.given_sum_dy.defined() ||
      args.out_sum_dy.defined() || args.out_sum_dy_xmu.defined())
    return false;
  if (args.geo.A == 1 && float32_or(args.weight, d) && float32_or(args.grad_weight, d) &&
      float32_or(args.grad_bias, d))
    return with_half(d, [&](auto tag) { backward_groups_kernel<decltype(tag)>(args); });
  if (!batch_norm_planes(args.geo) || !is_float32_or_none(args.weight) || !is_float32_or_none(args.grad_weight) ||
      !is_float32_or_none(args.grad_bias))
    return false;
  return with_half(d, [&](auto tag) { backward_kernel<decltype(tag)>(args); });
}

}  // namespace minidl::norm
