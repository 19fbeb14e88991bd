// The per-position and per-element math of the CUDA losses
// (ops/cuda/loss.cu), shared with the CPU tests: the same formulas as
// ops/cpu/loss.cpp and ops/cpu/binary_cross_entropy.cpp. A position's C
// classes sit S elements apart (ops/loss.h's ClassGeometry). Plain C++ with
// MINIDL_HOST_DEVICE, no CUDA header.
#pragma once

#include <cmath>
#include <cstdint>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE

namespace minidl::cuda_math {

template <class T>
MINIDL_HOST_DEVICE inline double class_weight(const T* weight, int64_t c) {
  return weight ? static_cast<double>(weight[c]) : 1.0;
}

// log(sum_c exp(x_c)) of one position, max subtracted; the sum in double.
template <class T>
MINIDL_HOST_DEVICE inline double log_sum_exp(const T* xc, int64_t C, int64_t S) {
  T mx = -INFINITY;
  for (int64_t c = 0; c < C; ++c) mx = mx < xc[c * S] ? xc[c * S] : mx;
  double sum = 0.0;
  for (int64_t c = 0; c < C; ++c) sum += static_cast<double>(std::exp(xc[c * S] - mx));
  return static_cast<double>(mx) + std::log(sum);
}

// Cross-entropy with label smoothing eps of a non-ignored position with
// target t: (1 - eps) w_t (lse - x_t) + eps / C sum_c w_c (lse - x_c).
template <class T>
MINIDL_HOST_DEVICE inline double cross_entropy_loss(const T* xc, int64_t C, int64_t S, int64_t t, double lse,
                                                    double eps, const T* weight) {
  double loss = (1.0 - eps) * class_weight(weight, t) * (lse - static_cast<double>(xc[t * S]));
  if (eps > 0.0) {
    double smooth = 0.0;
    for (int64_t c = 0; c < C; ++c) smooth += class_weight(weight, c) * (lse - static_cast<double>(xc[c * S]));
    loss += eps * smooth / static_cast<double>(C);
  }
  return loss;
}

// 0 = None, 1 = Mean, 2 = Sum (ops/loss.h's Reduction, as an int for the device).
// dL/dloss_i from the upstream gradient of the reduced output.
template <class T>
MINIDL_HOST_DEVICE inline double position_weight(const T* grad_out, int64_t i, int reduction, double total) {
  if (reduction == 0) return static_cast<double>(grad_out[i]);
  if (reduction == 2) return static_cast<double>(grad_out[0]);
  return static_cast<double>(grad_out[0]) / total;
}

// d loss / d x_c of a non-ignored position (w: position_weight; weight_sum: sum_k w_k):
//   w (softmax_c ((1 - eps) w_t + eps/C sum_k w_k) - eps/C w_c) - [c == t] w (1 - eps) w_t.
template <class T>
MINIDL_HOST_DEVICE inline T cross_entropy_grad(T xc, T lse, int64_t c, int64_t t, double w, double eps, int64_t C,
                                               double weight_sum, const T* weight) {
  const double uniform = C > 0 ? eps / static_cast<double>(C) : 0.0;
  const double hard = (1.0 - eps) * class_weight(weight, t);
  const T g = static_cast<T>(w * (std::exp(xc - lse) * (hard + uniform * weight_sum) - uniform * class_weight(weight, c)));
  return c == t ? static_cast<T>(g - static_cast<T>(w * hard)) : g;
}

// ---- binary cross-entropy ------------------------------------------------------

template <class T>
MINIDL_HOST_DEVICE inline T log_sigmoid(T x) {  // min(x, 0) - log1p(exp(-|x|))
  return (x < T(0) ? x : T(0)) - std::log1p(std::exp(-(x < T(0) ? -x : x)));
}

template <class T>
MINIDL_HOST_DEVICE inline T stable_sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

template <class T>
MINIDL_HOST_DEVICE inline T bce_loss(T x, T t) {  // logs clamped at -100, as PyTorch
  const T lx = std::log(x), l1mx = std::log1p(-x);
  const T log_x = lx < T(-100) ? T(-100) : lx;
  const T log_1mx = l1mx < T(-100) ? T(-100) : l1mx;
  return -(t * log_x + (T(1) - t) * log_1mx);
}

template <class T>
MINIDL_HOST_DEVICE inline T bce_grad_input(T g, T x, T t) {
  const T d = (T(1) - x) * x;
  return g * (x - t) / (d < T(1e-12) ? T(1e-12) : d);
}

template <class T>
MINIDL_HOST_DEVICE inline T bce_grad_target(T g, T x) {
  return g * (std::log1p(-x) - std::log(x));
}

// with logits; has_pw false means pos_weight 1.
template <class T>
MINIDL_HOST_DEVICE inline T bce_logits_loss(T x, T t, T pw, bool has_pw) {
  const T l = has_pw ? T(1) + (pw - T(1)) * t : T(1);
  return (T(1) - t) * x - l * log_sigmoid(x);
}

template <class T>
MINIDL_HOST_DEVICE inline T bce_logits_grad_input(T g, T x, T t, T pw, bool has_pw) {
  const T p = has_pw ? pw : T(1);
  return g * ((T(1) + (p - T(1)) * t) * stable_sigmoid(x) - p * t);
}

template <class T>
MINIDL_HOST_DEVICE inline T bce_logits_grad_target(T g, T x, T pw, bool has_pw) {
  return g * (has_pw ? log_sigmoid(-x) - pw * log_sigmoid(x) : -x);
}

}  // namespace minidl::cuda_math
