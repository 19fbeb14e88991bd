// The per-element math of the CUDA optimizer kernels (ops/cuda/fused_optim.cu),
// shared with the CPU tests: ops/fused_optim.h's SGD and Adam/AdamW updates in
// the parameter's compute type C = opmath_t<T> with the scalars rounded to C
// first (as ops/cpu/fused_optim.cpp and torch.optim's single-tensor path): for
// float and double that is the parameter's dtype; a float16/bfloat16
// parameter, gradient and state (a half model, Apex's O3) are loaded as
// float, updated in float and each rounded once, as the CPU's widened path.
// Also the vector norm's terms and clip_grad_norm_'s factor. Plain C++ with
// MINIDL_HOST_DEVICE.
#pragma once

#include <cmath>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE
#include "minidl/ops/cuda/opmath.h"

namespace minidl::cuda_math {

template <class T>
struct SgdScalars {
  T wd, mom, one_minus_damp, neg_lr;
  bool decay, nesterov, first_step, has_buf;
};

template <class C, class T>
MINIDL_HOST_DEVICE inline void sgd_update(const SgdScalars<C>& s, T& param, T grad, T* buf) {
  const C p = to_opmath(param);
  C g = to_opmath(grad);
  if (s.decay) g = g + s.wd * p;
  if (s.has_buf) {
    const C b = s.first_step ? g : to_opmath(*buf) * s.mom + s.one_minus_damp * g;
    *buf = from_opmath<T>(b);
    g = s.nesterov ? g + s.mom * b : b;
  }
  param = from_opmath<T>(p + s.neg_lr * g);
}

template <class T>
struct AdamScalars {
  T wd, shrink, w1, b2, w2, bc2, eps, neg_step;
  bool decay, decoupled, amsgrad;
};

template <class C, class T>
MINIDL_HOST_DEVICE inline void adam_update(const AdamScalars<C>& s, T& param, T grad, T& exp_avg, T& exp_avg_sq,
                                           T* v_max) {
  C p = to_opmath(param), g = to_opmath(grad), m = to_opmath(exp_avg), v = to_opmath(exp_avg_sq);
  if (s.decay) {
    if (s.decoupled)
      p = p * s.shrink;
    else
      g = g + s.wd * p;
  }
  m = m + s.w1 * (g - m);
  v = v * s.b2 + s.w2 * g * g;
  C second = v;
  if (s.amsgrad) {
    const C old_max = to_opmath(*v_max);
    second = old_max < v ? v : old_max;  // std::max(v_max, v)
    *v_max = from_opmath<T>(second);
  }
  const C denom = std::sqrt(second) / s.bc2 + s.eps;
  param = from_opmath<T>(p + s.neg_step * (m / denom));
  exp_avg = from_opmath<T>(m);
  exp_avg_sq = from_opmath<T>(v);
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
