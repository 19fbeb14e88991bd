// The per-element math of the binary and unary ops, shared by the CUDA
// kernels (ops/cuda/binary.cu, ops/cuda/unary.cu) and the CPU tests: the same
// formulas as the CPU kernels (ops/cpu/binary.cpp, ops/cpu/unary.cpp), in T,
// so a CUDA result differs from the CPU one only by the device's libm ulps.
// The op is a runtime argument: it is the same for every thread of a launch,
// so the switch costs no divergence and each dtype compiles one kernel.
// float16/bfloat16: the *_stored functions at the end load as float, run the
// float math and round once (ops/cuda/opmath.h), as the CPU kernels do
// through Float32Compute; for float, double and the integers they are the
// plain functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE
#include "minidl/ops/cuda/opmath.h"
#include "minidl/ops/binary.h"
#include "minidl/ops/unary.h"

namespace minidl::cuda_math {

// op(x, y); alpha scales y in add/sub (already converted to T by the host).
// NaN wins in maximum/minimum, as in PyTorch (x != x only for NaN).
template <class T>
MINIDL_HOST_DEVICE inline T binary_apply(BinaryOp op, T alpha, bool alpha_is_one, T x, T y) {
  switch (op) {
    case BinaryOp::Add: return alpha_is_one ? static_cast<T>(x + y) : static_cast<T>(x + alpha * y);
    case BinaryOp::Sub: return alpha_is_one ? static_cast<T>(x - y) : static_cast<T>(x - alpha * y);
    case BinaryOp::Mul: return static_cast<T>(x * y);
    case BinaryOp::Div: return static_cast<T>(x / y);
    case BinaryOp::Maximum: return (x > y || x != x) ? x : y;
    case BinaryOp::Minimum: return (x < y || x != x) ? x : y;
    case BinaryOp::Eq: return static_cast<T>(x == y);
    case BinaryOp::Gt: return static_cast<T>(x > y);
    case BinaryOp::Lt: return static_cast<T>(x < y);
  }
  return x;
}

inline constexpr double kSqrt1_2 = 0.70710678118654752440;      // 1/sqrt(2)
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1/sqrt(2 pi)
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
inline constexpr double kGeluC = 0.044715;

// UnaryParams converted to T once on the host.
template <class T>
struct UnaryArgs {
  T scalar = T(0);       // pow's exponent, leaky_relu's slope
  T lo = T(0), hi = T(0);  // clamp's bounds as T (an absent bound: T's extreme / infinity)
  bool has_lo = false, has_hi = false;
  double exponent = 0;  // pow's, exactly (2 and 0 are special-cased as on the CPU)
};

template <class T>
UnaryArgs<T> make_unary_args(const UnaryParams& p) {
  UnaryArgs<T> a;
  a.scalar = static_cast<T>(p.scalar);
  a.exponent = p.scalar;
  a.has_lo = !std::isinf(p.lo);
  a.has_hi = !std::isinf(p.hi);
  auto bound = [](double v) {
    if (std::isinf(v) && !std::numeric_limits<T>::has_infinity)
      return v < 0 ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
    return static_cast<T>(v);
  };
  a.lo = bound(p.lo);
  a.hi = bound(p.hi);
  return a;
}

// v < 0 without "pointless comparison" warnings for uint8.
template <class T>
MINIDL_HOST_DEVICE inline bool is_negative(T v) {
  if constexpr (std::is_unsigned_v<T>) {
    return false;
  } else {
    return v < T(0);
  }
}

// y = op(x). Integer dtypes reach only Neg, Abs, Clamp and Relu (the host checks).
template <class T>
MINIDL_HOST_DEVICE inline T unary_forward(UnaryOp op, const UnaryArgs<T>& a, T v) {
  switch (op) {
    case UnaryOp::Neg: return static_cast<T>(-v);
    case UnaryOp::Abs: return static_cast<T>(is_negative(v) ? -v : v);
    case UnaryOp::Clamp: {  // NaN stays NaN; lo > hi gives hi everywhere, as PyTorch
      const T up = v < a.lo ? a.lo : v;
      return up > a.hi ? a.hi : up;
    }
    case UnaryOp::Relu: return is_negative(v) ? T(0) : v;
    default: break;
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case UnaryOp::Exp: return std::exp(v);
      case UnaryOp::Log: return std::log(v);
      case UnaryOp::Sqrt: return std::sqrt(v);
      case UnaryOp::Rsqrt: return T(1) / std::sqrt(v);
      case UnaryOp::Pow: return a.exponent == 2.0 ? v * v : static_cast<T>(std::pow(v, a.scalar));
      case UnaryOp::LeakyRelu: return v > 0 ? v : static_cast<T>(v * a.scalar);
      case UnaryOp::Sigmoid: return T(1) / (T(1) + std::exp(-v));
      case UnaryOp::Tanh: return std::tanh(v);
      case UnaryOp::Gelu: return T(0.5) * v * (T(1) + std::erf(v * T(kSqrt1_2)));
      case UnaryOp::GeluTanh:
        return T(0.5) * v * (T(1) + std::tanh(T(kSqrt2OverPi) * (v + T(kGeluC) * v * v * v)));
      default: break;
    }
  }
  return v;
}

// dx = g * op'(.) from `s`, the saved x or y (ops/unary.cpp's table). Floating only.
template <class T>
MINIDL_HOST_DEVICE inline T unary_backward(UnaryOp op, const UnaryArgs<T>& a, T g, T s) {
  switch (op) {
    case UnaryOp::Neg: return -g;
    case UnaryOp::Exp: return g * s;
    case UnaryOp::Log: return g / s;
    case UnaryOp::Sqrt: return g / (T(2) * s);
    case UnaryOp::Rsqrt: return T(-0.5) * g * s * s * s;
    case UnaryOp::Abs: return s > 0 ? g : s < 0 ? -g : T(0);
    case UnaryOp::Pow:  // exponent 0: 0, not 0 * x^-1 (NaN at 0)
      return a.exponent == 0.0 ? T(0) : g * a.scalar * static_cast<T>(std::pow(s, a.scalar - T(1)));
    case UnaryOp::Clamp:  // strictly inside, as PyTorch 2.x with scalar bounds
      return ((!a.has_lo || s > a.lo) && (!a.has_hi || s < a.hi)) ? g : T(0);
    case UnaryOp::Relu: return s <= 0 ? T(0) : g;  // a NaN y passes g, as PyTorch's threshold_backward
    case UnaryOp::LeakyRelu: return s > 0 ? g : g * a.scalar;
    case UnaryOp::Sigmoid: return g * s * (T(1) - s);
    case UnaryOp::Tanh: return g * (T(1) - s * s);
    case UnaryOp::Gelu: {
      const T cdf = T(0.5) * (T(1) + std::erf(s * T(kSqrt1_2)));
      const T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * s * s);
      return g * (cdf + s * pdf);
    }
    case UnaryOp::GeluTanh: {
      const T t = std::tanh(T(kSqrt2OverPi) * (s + T(kGeluC) * s * s * s));
      const T dinner = T(kSqrt2OverPi) * (T(1) + T(3) * T(kGeluC) * s * s);
      return g * (T(0.5) * (T(1) + t) + T(0.5) * s * (T(1) - t * t) * dinner);
    }
  }
  return g;
}

// ---- on stored values: T in memory, opmath_t<T> in the math ----------------------
// UnaryArgs and alpha are made in the compute type (make_unary_args<opmath_t<T>>).

template <class T>
MINIDL_HOST_DEVICE inline T binary_apply_stored(BinaryOp op, opmath_t<T> alpha, bool alpha_is_one, T x, T y) {
  return from_opmath<T>(binary_apply<opmath_t<T>>(op, alpha, alpha_is_one, to_opmath(x), to_opmath(y)));
}

template <class T>
MINIDL_HOST_DEVICE inline T unary_forward_stored(UnaryOp op, const UnaryArgs<opmath_t<T>>& a, T v) {
  return from_opmath<T>(unary_forward<opmath_t<T>>(op, a, to_opmath(v)));
}

template <class T>
MINIDL_HOST_DEVICE inline T unary_backward_stored(UnaryOp op, const UnaryArgs<opmath_t<T>>& a, T g, T s) {
  return from_opmath<T>(unary_backward<opmath_t<T>>(op, a, to_opmath(g), to_opmath(s)));
}

}  // namespace minidl::cuda_math
