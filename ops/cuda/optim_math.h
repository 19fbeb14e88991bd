// The per-element math of the CUDA optimizer kernels (ops/cuda/fused_optim.cu),
// shared with the CPU tests: ops/fused_optim.h's SGD and Adam/AdamW updates in
// the parameter's dtype with the scalars rounded to it first (as
// ops/cpu/fused_optim.cpp and torch.optim's single-tensor path), the vector
// norm's terms and clip_grad_norm_'s factor. Plain C++ with MINIDL_HOST_DEVICE.
#pragma once

#include <cmath>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE

namespace minidl::cuda_math {

template <class T>
struct SgdScalars {
  T wd, mom, one_minus_damp, neg_lr;
  bool decay, nesterov, first_step, has_buf;
};

template <class T>
MINIDL_HOST_DEVICE inline void sgd_update(const SgdScalars<T>& s, T& p, T grad, T* buf) {
  T g = grad;
  if (s.decay) g = g + s.wd * p;
  if (s.has_buf) {
    *buf = s.first_step ? g : *buf * s.mom + s.one_minus_damp * g;
    g = s.nesterov ? g + s.mom * *buf : *buf;
  }
  p = p + s.neg_lr * g;
}

template <class T>
struct AdamScalars {
  T wd, shrink, w1, b2, w2, bc2, eps, neg_step;
  bool decay, decoupled, amsgrad;
};

template <class T>
MINIDL_HOST_DEVICE inline void adam_update(const AdamScalars<T>& s, T& p, T grad, T& m, T& v, T* v_max) {
  T g = grad;
  if (s.decay) {
    if (s.decoupled)
      p = p * s.shrink;
    else
      g = g + s.wd * p;
  }
  m = m + s.w1 * (g - m);
  v = v * s.b2 + s.w2 * g * g;
  T second = v;
  if (s.amsgrad) {
    *v_max = *v_max < v ? v : *v_max;  // std::max(v_max, v)
    second = *v_max;
  }
  const T denom = std::sqrt(second) / s.bc2 + s.eps;
  p = p + s.neg_step * (m / denom);
}

// |x|^p's contribution to the norm's accumulator (p = inf: |x|, combined by max).
MINIDL_HOST_DEVICE inline double norm_term(double x, double p) {
  const double a = x < 0 ? -x : x;
  if (p == 2.0) return x * x;
  if (p == 1.0 || std::isinf(p)) return a;
  return std::pow(a, p);
}

// Two accumulators of norm_term's values: a sum, or for p = inf a max that
// propagates NaN (torch.linalg.vector_norm(x, inf) of a NaN is NaN; a plain
// a < b ? b : a drops a NaN that comes second).
MINIDL_HOST_DEVICE inline double norm_combine(double a, double b, bool is_max) {
  if (!is_max) return a + b;
  if (a != a || b != b) return a + b;  // NaN
  return a < b ? b : a;
}

MINIDL_HOST_DEVICE inline double norm_finish(double acc, double p) {
  return std::isinf(p) ? acc : std::pow(acc, 1.0 / p);
}

// min(max_norm / (total + 1e-6), 1) with std::min's NaN behaviour (NaN stays NaN).
MINIDL_HOST_DEVICE inline double clip_coefficient(double max_norm, double total) {
  const double q = max_norm / (total + 1e-6);
  return 1.0 < q ? 1.0 : q;
}

}  // namespace minidl::cuda_math
