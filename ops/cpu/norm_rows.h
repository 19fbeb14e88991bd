// The per-row loops of the CPU normalization kernels (ops/cpu/norm_core.cpp),
// shared with the float16/bfloat16 BatchNorm path (ops/cpu/norm_core_half.cpp),
// which runs them on float32 copies of one row at a time.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace minidl::norm::rows {

// Longest run reduced exactly in two passes (fits in L1: 8 KiB of float).
constexpr int64_t kChunk = 2048;
// Below this many elements the OpenMP start-up costs more than it saves.
constexpr int64_t kParallelMin = 32768;

// Count, mean and sum of squared deviations of a set of values.
struct Moments {
  double n = 0, mean = 0, m2 = 0;
  // Chan et al.'s parallel merge of another set's moments into this one.
  void merge(double nb, double mean_b, double m2_b) {
    if (nb == 0) return;
    const double total = n + nb;
    const double delta = mean_b - mean;
    // inf - inf is NaN: a weighted mean keeps an infinite mean infinite (a
    // chunk holding +inf, then finite ones, gave a NaN running_mean).
    mean = std::isfinite(delta) ? mean + delta * nb / total : (n * mean + nb * mean_b) / total;
    m2 += m2_b + delta * delta * n * nb / total;
    n = total;
  }
};

template <class T>
void add_run(Moments& m, const T* x, int64_t len) {
  for (int64_t i0 = 0; i0 < len; i0 += kChunk) {
    const int64_t n = std::min(kChunk, len - i0);
    const T* p = x + i0;
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(p[i]);
    const double mean = sum / static_cast<double>(n);
    double m2 = 0;
#pragma omp simd reduction(+ : m2)
    for (int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(p[i]) - mean;
      m2 += d * d;
    }
    m.merge(static_cast<double>(n), mean, m2);
  }
}

// Calls f(k0, k1) over [0, K) in pieces of about kChunk values, the last
// piece first. A second pass over a long row that walks it backwards starts on
// the data the first pass read last, which is still in cache.
template <class F>
void last_chunk_first(int64_t K, int64_t S, F&& f) {
  const int64_t per = std::max<int64_t>(1, kChunk / std::max<int64_t>(S, 1));
  for (int64_t k1 = K; k1 > 0; k1 -= per) f(std::max<int64_t>(0, k1 - per), k1);
}

// Calls f(has_weight, has_bias) with compile-time booleans, so the inner
// loops carry no per-element branches.
template <class F>
void with_affine(bool has_w, bool has_b, F&& f) {
  if (has_w && has_b) f(std::true_type{}, std::true_type{});
  else if (has_w) f(std::true_type{}, std::false_type{});
  else if (has_b) f(std::false_type{}, std::true_type{});
  else f(std::false_type{}, std::false_type{});
}

// One "row" is the run of K*S contiguous values of one (a, g); its affine
// channels are c0 .. c0 + K - 1.

// y = (x - mean) * invstd * w_c + b_c over one row.
template <class T>
void normalize_row(const T* x, T* y, int64_t K, int64_t S, int64_t c0, const T* w, const T* b,
                   double mean, double invstd) {
  const T m = static_cast<T>(mean);
  if (S == 1 && K > 1) {  // one affine parameter per element (LayerNorm)
    const T rs = static_cast<T>(invstd);
    with_affine(w != nullptr, b != nullptr, [&](auto has_w, auto has_b) {
#pragma omp simd
      for (int64_t k = 0; k < K; ++k) {
        T v = (x[k] - m) * rs;
        if constexpr (has_w) v *= w[c0 + k];
        if constexpr (has_b) v += b[c0 + k];
        y[k] = v;
      }
    });
    return;
  }
  for (int64_t k = 0; k < K; ++k) {  // one affine parameter per run of S values
    const T scale = static_cast<T>(invstd * (w ? static_cast<double>(w[c0 + k]) : 1.0));
    const T shift = b ? b[c0 + k] : T(0);
    const T* xk = x + k * S;
    T* yk = y + k * S;
#pragma omp simd
    for (int64_t s = 0; s < S; ++s) yk[s] = (xk[s] - m) * scale + shift;
  }
}

// Sums over one row: s1 += sum w_c dy, s2 += sum w_c dy (x - mean); with
// acc_w, also acc_w[c] += invstd sum dy (x - mean) and acc_b[c] += sum dy.
template <class T>
void reduce_row(const T* dy, const T* x, int64_t K, int64_t S, int64_t c0, const T* w, double mean,
                double invstd, double* acc_w, double* acc_b, double& s1, double& s2) {
  if (S == 1 && K > 1) {
    double t1 = 0, t2 = 0;
    with_affine(w != nullptr, acc_w != nullptr, [&](auto has_w, auto has_acc) {
#pragma omp simd reduction(+ : t1, t2)
      for (int64_t k = 0; k < K; ++k) {
        const double d = static_cast<double>(dy[k]);
        const double xmu = static_cast<double>(x[k]) - mean;
        double wd = d;
        if constexpr (has_w) wd *= static_cast<double>(w[c0 + k]);
        t1 += wd;
        t2 += wd * xmu;
        if constexpr (has_acc) {
          acc_b[c0 + k] += d;
          acc_w[c0 + k] += d * xmu * invstd;
        }
      }
    });
    s1 += t1;
    s2 += t2;
    return;
  }
  for (int64_t k = 0; k < K; ++k) {
    const T* dk = dy + k * S;
    const T* xk = x + k * S;
    double sd = 0, sdx = 0;
#pragma omp simd reduction(+ : sd, sdx)
    for (int64_t s = 0; s < S; ++s) {
      const double d = static_cast<double>(dk[s]);
      sd += d;
      sdx += d * (static_cast<double>(xk[s]) - mean);
    }
    const double wc = w ? static_cast<double>(w[c0 + k]) : 1.0;
    s1 += wc * sd;
    s2 += wc * sdx;
    if (acc_w) {
      acc_b[c0 + k] += sd;
      acc_w[c0 + k] += sdx * invstd;
    }
  }
}

// dx over one row: dx = w_c invstd dy + (x - mean) beta + gamma, where
// beta = -invstd^3 sum_dy_xmu / count and gamma = -invstd sum_dy / count
// (both 0 when the statistics were constants).
template <class T>
void elemt_row(const T* dy, const T* x, T* dx, int64_t K, int64_t S, int64_t c0, const T* w,
               double mean, double invstd, double beta_d, double gamma_d) {
  const T m = static_cast<T>(mean), beta = static_cast<T>(beta_d), gamma = static_cast<T>(gamma_d);
  if (beta_d == 0 && gamma_d == 0) {
    // Constant statistics (eval): dx = w invstd dy, as PyTorch; (x - mean) * 0
    // made dx NaN wherever x was inf or NaN.
    for (int64_t k = 0; k < K; ++k) {
      const T alpha = static_cast<T>(invstd * (w ? static_cast<double>(w[c0 + k]) : 1.0));
      const T* dk = dy + k * S;
      T* dxk = dx + k * S;
#pragma omp simd
      for (int64_t s = 0; s < S; ++s) dxk[s] = dk[s] * alpha;
    }
    return;
  }
  if (S == 1 && K > 1) {
    const T rs = static_cast<T>(invstd);
    with_affine(w != nullptr, false, [&](auto has_w, auto) {
#pragma omp simd
      for (int64_t k = 0; k < K; ++k) {
        T alpha = rs;
        if constexpr (has_w) alpha *= w[c0 + k];
        dx[k] = dy[k] * alpha + (x[k] - m) * beta + gamma;
      }
    });
    return;
  }
  for (int64_t k = 0; k < K; ++k) {
    const T alpha = static_cast<T>(invstd * (w ? static_cast<double>(w[c0 + k]) : 1.0));
    const T* dk = dy + k * S;
    const T* xk = x + k * S;
    T* dxk = dx + k * S;
#pragma omp simd
    for (int64_t s = 0; s < S; ++s) dxk[s] = dk[s] * alpha + (xk[s] - m) * beta + gamma;
  }
}

}  // namespace minidl::norm::rows
