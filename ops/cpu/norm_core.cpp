// CPU kernels of the shared normalization core (ops/norm_core.h's kernel
// interface): statistics, normalize and backward over the (A, G, K, S) view,
// and the running-statistics update and eval statistics.
// Statistics: each contiguous run of <= kChunk values is reduced exactly in
// two passes in double, and the runs are merged with Chan's formula (so one
// trip to memory, and no cancellation for data far from zero).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "minidl/ops/cpu/float32_compute.h"
#include "minidl/ops/cpu/norm_core_half.h"
#include "minidl/ops/cpu/norm_rows.h"
#include "minidl/ops/norm_core.h"

namespace minidl::norm {

namespace {

using namespace rows;

// Rows per block when (N, C) input (or channels-last BatchNorm's (N*H*W, C))
// is reduced column-wise: at least 64, and about 16K values, so that the
// partial results merged afterwards stay few (with 64 rows of 64 channels,
// channels-last BatchNorm at (128, 64, 32, 32) merged 2048 partials per
// channel, a division each: 1 ms of its 7.4 ms forward on Zen 4, 1 thread).
inline int64_t rows_per_block(int64_t G) { return std::max<int64_t>(64, 16384 / std::max<int64_t>(G, 1)); }

// Columns summed together in registers (4 zmm / 8 ymm of doubles a sum):
// with a run-time row length the sums lived in memory (a store and a reload
// per value). With the blocks above, channels-last BatchNorm's forward at
// (128, 64, 32, 32) went 7.4 -> 4.6-5.2 ms (Zen 4, 1 thread; tiles of 16:
// 5.6 ms, blocks of 8K values: 5.5-6.2 ms).
constexpr int64_t kColumnTile = 32;

// acc[j] += f(a, j) for the `width` columns of one tile over rows [a0, a1);
// a full tile has a compile-time width.
template <class F>
inline void tile_sum(int64_t a0, int64_t a1, int64_t width, double* acc, F&& f) {
  if (width == kColumnTile) {
    for (int64_t a = a0; a < a1; ++a)
#pragma omp simd
      for (int64_t j = 0; j < kColumnTile; ++j) acc[j] += f(a, j);
  } else {
    for (int64_t a = a0; a < a1; ++a)
      for (int64_t j = 0; j < width; ++j) acc[j] += f(a, j);
  }
}

// Exact two-pass mean and M2 of each of the G columns over rows [a0, a1) of
// a row-major (rows, G) array, a tile of columns at a time.
template <class T>
void column_moments(const T* x, int64_t G, int64_t a0, int64_t a1, double* mean, double* m2) {
  const double n = static_cast<double>(a1 - a0);
  for (int64_t g0 = 0; g0 < G; g0 += kColumnTile) {
    const int64_t width = std::min(kColumnTile, G - g0);
    const T* xt = x + g0;
    double s[kColumnTile] = {}, m[kColumnTile] = {}, q[kColumnTile] = {};
    tile_sum(a0, a1, width, s, [&](int64_t a, int64_t j) { return static_cast<double>(xt[a * G + j]); });
    for (int64_t j = 0; j < width; ++j) m[j] = s[j] / n;
    tile_sum(a0, a1, width, q, [&](int64_t a, int64_t j) {
      const double d = static_cast<double>(xt[a * G + j]) - m[j];
      return d * d;
    });
    for (int64_t j = 0; j < width; ++j) mean[g0 + j] = m[j], m2[g0 + j] = q[j];
  }
}

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// Schedules. With A == 1 (IN, GN, LN) a group is one row: each task reduces
// its row and normalizes it while it is still in cache. With A > 1 (BN) a
// group's rows are A strided blocks: rows are swept in memory order, their
// partial results merged per group in a fixed order (so the result does not
// depend on the thread count), then rows are swept again; (N, C) input, whose
// rows are single values, is swept as columns instead. In the A == 1
// backward, the per-channel weight/bias sums go to per-thread double buffers
// added up at the end (LayerNorm has one parameter per element of a row).

template <class T>
void forward_kernel(const NormForwardArgs& args) {
  const NormGeometry& geo = args.geo;
  const T* x = args.input.data_ptr<T>();
  T* y = args.output.defined() ? args.output.data_ptr<T>() : nullptr;
  const T* w = data_or_null<T>(args.weight);
  const T* b = data_or_null<T>(args.bias);
  double* mean_out = args.mean.data_ptr<double>();
  double* invstd_out = args.invstd.data_ptr<double>();
  double* var_out = args.var.defined() ? args.var.data_ptr<double>() : nullptr;
  const int64_t G = geo.G, K = geo.K, S = geo.S, run = K * S, rows = geo.A * G;
  const bool parallel = geo.numel() >= kParallelMin;

  auto set_stats = [&](int64_t g, const Moments& m) {
    if (m.n == 0) {  // no values: the statistics are undefined; report zeros
      mean_out[g] = invstd_out[g] = 0;
      if (var_out) var_out[g] = 0;
      return;
    }
    const double var = m.m2 / m.n;
    mean_out[g] = m.mean;
    invstd_out[g] = 1.0 / std::sqrt(var + args.eps);
    if (var_out) var_out[g] = var;
  };

  if (geo.A == 1) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t g = 0; g < G; ++g) {
      if (args.use_input_stats) {
        Moments m;
        add_run(m, x + g * run, run);
        set_stats(g, m);
      }
      if (y)
        last_chunk_first(K, S, [&](int64_t k0, int64_t k1) {
          const int64_t off = g * run + k0 * S;
          normalize_row(x + off, y + off, k1 - k0, S, (g % geo.P) * K + k0, w, b, mean_out[g], invstd_out[g]);
        });
    }
    return;
  }

  // A > 1 (BatchNorm). Runs of one value ((N, C) input) are handled as
  // columns: blocks of rows_per_block(G) rows of G channels, a tile of channels at a time.
  const bool columns = run == 1;
  const int64_t block_rows = rows_per_block(G), blocks = (geo.A + block_rows - 1) / block_rows;
  if (args.use_input_stats) {
    // Partial moments per (row or row block, group), merged per group in order.
    const int64_t parts = columns ? blocks : geo.A;
    std::vector<double> part_n(static_cast<size_t>(parts)), part_mean(static_cast<size_t>(parts * G)),
        part_m2(static_cast<size_t>(parts * G));
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t p = 0; p < parts; ++p) {
      if (columns) {
        const int64_t a0 = p * block_rows, a1 = std::min(geo.A, a0 + block_rows);
        column_moments(x, G, a0, a1, &part_mean[p * G], &part_m2[p * G]);
        part_n[p] = static_cast<double>(a1 - a0);
      } else {
        for (int64_t g = 0; g < G; ++g) {
          Moments m;
          add_run(m, x + (p * G + g) * run, run);
          part_mean[p * G + g] = m.mean;
          part_m2[p * G + g] = m.m2;
        }
        part_n[p] = static_cast<double>(run);
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      Moments m;
      for (int64_t p = 0; p < parts; ++p) m.merge(part_n[p], part_mean[p * G + g], part_m2[p * G + g]);
      set_stats(g, m);
    }
  }
  if (!y) return;
  if (columns) {
    std::vector<T> m(static_cast<size_t>(G)), scale(static_cast<size_t>(G)), shift(static_cast<size_t>(G));
    for (int64_t g = 0; g < G; ++g) {
      const int64_t c = g % geo.P;
      m[g] = static_cast<T>(mean_out[g]);
      scale[g] = static_cast<T>(invstd_out[g] * (w ? static_cast<double>(w[c]) : 1.0));
      shift[g] = b ? b[c] : T(0);
    }
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t a = 0; a < geo.A; ++a) {
      const T* xa = x + a * G;
      T* ya = y + a * G;
#pragma omp simd
      for (int64_t g = 0; g < G; ++g) ya[g] = (xa[g] - m[g]) * scale[g] + shift[g];
    }
    return;
  }
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = r % G;
    normalize_row(x + r * run, y + r * run, K, S, (g % geo.P) * K, w, b, mean_out[g], invstd_out[g]);
  }
}

template <class T>
void backward_kernel(const NormBackwardArgs& args) {
  const NormGeometry& geo = args.geo;
  const T* dy = args.grad_out.data_ptr<T>();
  const T* x = args.input.data_ptr<T>();
  const T* w = data_or_null<T>(args.weight);
  T* dx = args.grad_input.defined() ? args.grad_input.data_ptr<T>() : nullptr;
  T* dw = args.grad_weight.defined() ? args.grad_weight.data_ptr<T>() : nullptr;
  T* db = args.grad_bias.defined() ? args.grad_bias.data_ptr<T>() : nullptr;
  const double* means = args.mean.data_ptr<double>();
  const double* invstds = args.invstd.data_ptr<double>();
  const bool given_sums = args.given_sum_dy.defined();
  const double* given_s1 = given_sums ? args.given_sum_dy.data_ptr<double>() : nullptr;
  const double* given_s2 = given_sums ? args.given_sum_dy_xmu.data_ptr<double>() : nullptr;
  double* out_s1 = args.out_sum_dy.defined() ? args.out_sum_dy.data_ptr<double>() : nullptr;
  double* out_s2 = args.out_sum_dy_xmu.defined() ? args.out_sum_dy_xmu.data_ptr<double>() : nullptr;
  const bool want_params = dw || db;
  const bool reduce = want_params || out_s1 || out_s2 || (dx && args.batch_stats && !given_sums);
  const double count = !given_sums                          ? static_cast<double>(geo.group_size())
                       : args.given_count_tensor.defined() ? args.given_count_tensor.data_ptr<double>()[0]
                                                           : args.given_count;
  const int64_t G = geo.G, K = geo.K, S = geo.S, run = K * S, rows = geo.A * G, C = geo.channels();
  const bool parallel = geo.numel() >= kParallelMin;

  // The elementwise coefficients of group g from its (w-weighted) sums.
  auto coefficients = [&](int64_t g, double s1, double s2, double& beta, double& gamma) {
    beta = gamma = 0;
    if (!args.batch_stats) return;
    if (given_sums) s1 = given_s1[g], s2 = given_s2[g];
    const double invstd = invstds[g];
    beta = -invstd * invstd * invstd * s2 / count;
    gamma = -invstd * s1 / count;
  };
  auto write_params = [&](const std::vector<double>& acc, int threads) {  // [acc_w | acc_b] per thread
    for (int64_t c = 0; c < C; ++c) {
      double sw = 0, sb = 0;
      for (int t = 0; t < threads; ++t) {
        sw += acc[static_cast<size_t>(2 * C * t + c)];
        sb += acc[static_cast<size_t>(2 * C * t + C + c)];
      }
      if (dw) dw[c] = static_cast<T>(sw);
      if (db) db[c] = static_cast<T>(sb);
    }
  };

  if (geo.A == 1 || K > 1) {  // per group: reduce, then the elementwise pass while in cache
    const int threads = parallel ? omp_get_max_threads() : 1;
    std::vector<double> acc(want_params ? static_cast<size_t>(2 * C * threads) : 0, 0.0);
#pragma omp parallel num_threads(threads) if (parallel)
    {
      double* acc_w = want_params ? acc.data() + 2 * C * omp_get_thread_num() : nullptr;
      double* acc_b = want_params ? acc_w + C : nullptr;
#pragma omp for schedule(static)
      for (int64_t g = 0; g < G; ++g) {
        const int64_t c0 = (g % geo.P) * K;
        double s1 = 0, s2 = 0;
        if (reduce)
          for (int64_t a = 0; a < geo.A; ++a) {
            const int64_t off = (a * G + g) * run;
            reduce_row(dy + off, x + off, K, S, c0, w, means[g], invstds[g], acc_w, acc_b, s1, s2);
          }
        if (out_s1) out_s1[g] = s1;
        if (out_s2) out_s2[g] = s2;
        if (!dx) continue;
        double beta, gamma;
        coefficients(g, s1, s2, beta, gamma);
        for (int64_t a = 0; a < geo.A; ++a)
          last_chunk_first(K, S, [&](int64_t k0, int64_t k1) {
            const int64_t off = (a * G + g) * run + k0 * S;
            elemt_row(dy + off, x + off, dx + off, k1 - k0, S, c0 + k0, w, means[g], invstds[g], beta, gamma);
          });
      }
    }
    if (want_params) write_params(acc, threads);
    return;
  }

  // A > 1, K == 1 (BatchNorm): per-row (or, for runs of one value, per row
  // block) plain sums in memory order, added up per group in a fixed order.
  const bool columns = run == 1;
  const int64_t block_rows = rows_per_block(G), blocks = (geo.A + block_rows - 1) / block_rows;
  std::vector<double> sum1(static_cast<size_t>(G), 0.0), sum2(static_cast<size_t>(G), 0.0);
  if (reduce) {
    const int64_t parts = columns ? blocks : geo.A;
    std::vector<double> part_sd(static_cast<size_t>(parts * G), 0.0), part_sdx(static_cast<size_t>(parts * G), 0.0);
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t p = 0; p < parts; ++p) {
      double* sd = part_sd.data() + p * G;  // not &v[i]: G may be 0 (no channels)
      double* sdx = part_sdx.data() + p * G;
      if (columns) {
        const int64_t a0 = p * block_rows, a1 = std::min(geo.A, a0 + block_rows);
        for (int64_t g0 = 0; g0 < G; g0 += kColumnTile) {
          const int64_t width = std::min(kColumnTile, G - g0);
          const T *dyt = dy + g0, *xt = x + g0;
          double s1[kColumnTile] = {}, s2[kColumnTile] = {}, m[kColumnTile] = {};
          for (int64_t j = 0; j < width; ++j) m[j] = means[g0 + j];
          tile_sum(a0, a1, width, s1, [&](int64_t a, int64_t j) { return static_cast<double>(dyt[a * G + j]); });
          tile_sum(a0, a1, width, s2, [&](int64_t a, int64_t j) {
            return static_cast<double>(dyt[a * G + j]) * (static_cast<double>(xt[a * G + j]) - m[j]);
          });
          for (int64_t j = 0; j < width; ++j) sd[g0 + j] = s1[j], sdx[g0 + j] = s2[j];
        }
      } else {
        for (int64_t g = 0; g < G; ++g) {
          const int64_t off = (p * G + g) * run;
          reduce_row<T>(dy + off, x + off, 1, S, 0, nullptr, means[g], invstds[g], nullptr, nullptr, sd[g], sdx[g]);
        }
      }
    }
    std::vector<double> acc(want_params ? static_cast<size_t>(2 * C) : 0, 0.0);
    for (int64_t g = 0; g < G; ++g) {
      double sd = 0, sdx = 0;
      for (int64_t p = 0; p < parts; ++p) sd += part_sd[p * G + g], sdx += part_sdx[p * G + g];
      const double wc = w ? static_cast<double>(w[(g % geo.P)]) : 1.0;
      sum1[g] = wc * sd;
      sum2[g] = wc * sdx;
      if (out_s1) out_s1[g] = sum1[g];
      if (out_s2) out_s2[g] = sum2[g];
      if (want_params) {
        acc[g % geo.P] += sdx * invstds[g];
        acc[C + g % geo.P] += sd;
      }
    }
    if (want_params) write_params(acc, 1);
  }
  if (!dx) return;
  std::vector<double> beta(static_cast<size_t>(G)), gamma(static_cast<size_t>(G));
  for (int64_t g = 0; g < G; ++g) coefficients(g, sum1[g], sum2[g], beta[g], gamma[g]);
  if (columns) {
    std::vector<T> m(static_cast<size_t>(G)), alpha(static_cast<size_t>(G)), bt(static_cast<size_t>(G)),
        gm(static_cast<size_t>(G));
    for (int64_t g = 0; g < G; ++g) {
      m[g] = static_cast<T>(means[g]);
      alpha[g] = static_cast<T>(invstds[g] * (w ? static_cast<double>(w[g % geo.P]) : 1.0));
      bt[g] = static_cast<T>(beta[g]);
      gm[g] = static_cast<T>(gamma[g]);
    }
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t a = 0; a < geo.A; ++a) {
      const T* dya = dy + a * G;
      const T* xa = x + a * G;
      T* dxa = dx + a * G;
      if (!args.batch_stats) {  // eval: dx = w invstd dy whatever x is (inf and NaN included), as elemt_row
#pragma omp simd
        for (int64_t g = 0; g < G; ++g) dxa[g] = dya[g] * alpha[g];
        continue;
      }
#pragma omp simd
      for (int64_t g = 0; g < G; ++g) dxa[g] = dya[g] * alpha[g] + (xa[g] - m[g]) * bt[g] + gm[g];
    }
    return;
  }
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = r % G;
    elemt_row(dy + r * run, x + r * run, dx + r * run, 1, S, g % geo.P, w, means[g], invstds[g], beta[g], gamma[g]);
  }
}

// Running statistics: a few hundred channels, so one serial loop.
template <class T>
void update_running_stats_kernel(const NormRunningStatsArgs& args) {
  T* rm = args.running_mean.data_ptr<T>();
  T* rv = args.running_var.data_ptr<T>();
  const double* mean = args.batch_mean.data_ptr<double>();
  const double* var = args.batch_var.data_ptr<double>();
  const int64_t C = args.running_mean.numel(), R = args.rows;
  const double m = args.momentum, corr = args.var_correction;
  for (int64_t c = 0; c < C; ++c) {
    double bm = mean[c], bv = var[c] * corr;  // one row: the row itself
    if (R > 1) {
      bm = bv = 0.0;
      for (int64_t r = 0; r < R; ++r) {
        bm += mean[r * C + c] / static_cast<double>(R);
        bv += var[r * C + c] * corr / static_cast<double>(R);
      }
    }
    rm[c] = static_cast<T>((1.0 - m) * static_cast<double>(rm[c]) + m * bm);
    rv[c] = static_cast<T>((1.0 - m) * static_cast<double>(rv[c]) + m * bv);
  }
}

template <class T>
void stats_from_running_kernel(const NormStatsFromRunningArgs& args) {
  const T* rm = args.running_mean.data_ptr<T>();
  const T* rv = args.running_var.data_ptr<T>();
  double* mean = args.mean.data_ptr<double>();
  double* invstd = args.invstd.data_ptr<double>();
  const int64_t C = args.running_mean.numel();
  for (int64_t r = 0; r < args.rows; ++r)
    for (int64_t c = 0; c < C; ++c) {
      mean[r * C + c] = static_cast<double>(rm[c]);
      invstd[r * C + c] = 1.0 / std::sqrt(static_cast<double>(rv[c]) + args.eps);
    }
}

void forward_cpu(const NormForwardArgs& args) {
  MINIDL_DISPATCH_FLOATING(args.input.dtype(), "normalization", [&] { forward_kernel<scalar_t>(args); });
}

void backward_cpu(const NormBackwardArgs& args) {
  MINIDL_DISPATCH_FLOATING(args.input.dtype(), "normalization backward",
                           [&] { backward_kernel<scalar_t>(args); });
}

void update_running_stats_cpu(const NormRunningStatsArgs& args) {
  MINIDL_DISPATCH_FLOATING(args.running_mean.dtype(), "update running statistics",
                           [&] { update_running_stats_kernel<scalar_t>(args); });
}

void stats_from_running_cpu(const NormStatsFromRunningArgs& args) {
  MINIDL_DISPATCH_FLOATING(args.running_mean.dtype(), "statistics from running statistics",
                           [&] { stats_from_running_kernel<scalar_t>(args); });
}

// A float16/bfloat16 input (and grad_out) next to float32 or 16-bit parameters
// (BatchNorm under autocast, cuDNN's convention): the float32 kernel runs on
// float32 copies of the 16-bit tensors (ops/cpu/float32_compute.h); statistics
// stay float64, parameters keep their dtype, outputs are rounded back.
// BatchNorm over planes with float32 (or no) parameters, autocast's case, and
// GroupNorm/LayerNorm/InstanceNorm skip the copies: ops/cpu/norm_core_half.cpp
// reads the 16-bit rows directly. Still widened: (N, C) BatchNorm input,
// 16-bit BatchNorm parameters, SyncBatchNorm's given or returned sums.
void forward_any_cpu(const NormForwardArgs& args) {
  if (forward_half_cpu(args)) return;  // reads the 16-bit input directly
  NormForwardArgs wide = args;
  bool any = false;
  for (Tensor* t : {&wide.input, &wide.output, &wide.weight, &wide.bias}) {
    if (!cpu::is_reduced_tensor(*t)) continue;
    *t = cpu::widen_to_float32(*t);
    any = true;
  }
  if (!any) return forward_cpu(args);
  forward_cpu(wide);
  if (cpu::is_reduced_tensor(args.output)) cpu::round_into(args.output, wide.output);
}

void backward_any_cpu(const NormBackwardArgs& args) {
  if (backward_half_cpu(args)) return;
  NormBackwardArgs wide = args;
  bool any = false;
  for (Tensor* t : {&wide.grad_out, &wide.input, &wide.weight, &wide.grad_input, &wide.grad_weight,
                    &wide.grad_bias}) {
    if (!cpu::is_reduced_tensor(*t)) continue;
    *t = cpu::widen_to_float32(*t);
    any = true;
  }
  if (!any) return backward_cpu(args);
  backward_cpu(wide);
  for (auto [out, w] : {std::pair{&args.grad_input, &wide.grad_input}, std::pair{&args.grad_weight, &wide.grad_weight},
                        std::pair{&args.grad_bias, &wide.grad_bias}})
    if (cpu::is_reduced_tensor(*out)) cpu::round_into(*out, *w);
}

// 16-bit running statistics (a model cast to half whole, Apex's O3; PyTorch's
// CPU BatchNorm takes them too): updated and read in float32, the running
// statistics rounded back once per update.
void update_running_stats_any_cpu(const NormRunningStatsArgs& args) {
  if (!cpu::is_reduced_tensor(args.running_mean) && !cpu::is_reduced_tensor(args.running_var))
    return update_running_stats_cpu(args);
  NormRunningStatsArgs wide = args;
  for (Tensor* t : {&wide.running_mean, &wide.running_var})
    if (cpu::is_reduced_tensor(*t)) *t = cpu::widen_to_float32(*t);
  update_running_stats_cpu(wide);
  for (auto [out, w] : {std::pair{&args.running_mean, &wide.running_mean}, std::pair{&args.running_var, &wide.running_var}})
    if (cpu::is_reduced_tensor(*out)) cpu::round_into(*out, *w);
}

void stats_from_running_any_cpu(const NormStatsFromRunningArgs& args) {
  NormStatsFromRunningArgs wide = args;
  for (Tensor* t : {&wide.running_mean, &wide.running_var})
    if (cpu::is_reduced_tensor(*t)) *t = cpu::widen_to_float32(*t);
  stats_from_running_cpu(wide);
}

}  // namespace

}  // namespace minidl::norm

namespace minidl {

void register_norm_cpu_kernels() {
  norm::norm_forward_stub.set(DeviceType::CPU, norm::forward_any_cpu);
  norm::norm_backward_stub.set(DeviceType::CPU, norm::backward_any_cpu);
  norm::norm_update_running_stats_stub.set(DeviceType::CPU, norm::update_running_stats_any_cpu);
  norm::norm_stats_from_running_stub.set(DeviceType::CPU, norm::stats_from_running_any_cpu);
}

}  // namespace minidl
