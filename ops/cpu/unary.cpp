// CPU kernels of the elementwise unary ops and activations (ops/unary.h's
// kernel interface): forward y = f(x) and backward dx = g * f'(.) from the
// saved x or y, as the table at the top of ops/unary.cpp lists.
// relu on float16/bfloat16 reads and writes them directly (its result is the
// input or 0, exact in any type); every other op on them goes through
// Float32Compute.
// exp, log, sigmoid, tanh, gelu and gelu tanh (forward and backward) are Eigen
// array expressions (array_loop: packet math on contiguous rows; error bounds
// in ops/cpu/array_math.h and tests/test_vec_math.cpp). Where Eigen has no
// packet version for the type (tanh, erf and log1p on double) it computes the
// same expression with std:: functions. sqrt, rsqrt and pow stay scalar
// loops: Eigen's fast packet sqrt flushes subnormal inputs to 0, and pow keeps
// std::pow's exact special cases (not measured as a bottleneck).
// GCC 12 reports its own _mm512_undefined_* inside the AVX-512 intrinsics
// Eigen's packet math inlines as (maybe) uninitialized (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <unsupported/Eigen/SpecialFunctions>  // erf on arrays (vectorized for float)

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "minidl/ops/cpu/array_loop.h"
#include "minidl/ops/cpu/array_math.h"
#include "minidl/ops/cpu/float32_compute.h"
#include "minidl/ops/cpu/strided_loop.h"
#include "minidl/ops/unary.h"

namespace minidl {

namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;           // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;        // 1/sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;       // sqrt(2/pi)
constexpr double kGeluC = 0.044715;

bool runs_on_integers(UnaryOp op) {
  return op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Clamp || op == UnaryOp::Relu;
}

// ---- CPU kernels ---------------------------------------------------------------

template <class T, class F>
void unary_loop(const Tensor& out, const Tensor& x, F f) {
  T* o = static_cast<T*>(out.raw_data());
  const T* in = static_cast<const T*>(x.raw_data());
  for_each_row<2>(out.shape(), {out.strides(), x.strides()},
                  [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& step) {
                    T* po = o + off[0];
                    const T* pi = in + off[1];
                    if (step[0] == 1 && step[1] == 1) {
                      for (int64_t i = 0; i < n; ++i) po[i] = f(pi[i]);
                    } else {
                      for (int64_t i = 0; i < n; ++i) po[i * step[0]] = f(pi[i * step[1]]);
                    }
                  });
}

// dx[i] = f(grad[i], saved[i]).
template <class T, class F>
void backward_loop(const Tensor& dx, const Tensor& grad, const Tensor& saved, F f) {
  T* o = static_cast<T*>(dx.raw_data());
  const T* g = static_cast<const T*>(grad.raw_data());
  const T* s = static_cast<const T*>(saved.raw_data());
  for_each_row<3>(dx.shape(), {dx.strides(), grad.strides(), saved.strides()},
                  [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& step) {
                    T* po = o + off[0];
                    const T* pg = g + off[1];
                    const T* ps = s + off[2];
                    if (step[0] == 1 && step[1] == 1 && step[2] == 1) {
                      for (int64_t i = 0; i < n; ++i) po[i] = f(pg[i], ps[i]);
                    } else {
                      for (int64_t i = 0; i < n; ++i) po[i * step[0]] = f(pg[i * step[1]], ps[i * step[2]]);
                    }
                  });
}

// The type T's negation is computed in: uint64 for int64, whose wrap-around is defined.
template <class T>
using Wrap = std::conditional_t<std::is_same_v<T, int64_t>, uint64_t, T>;

// A clamp bound as T; an infinite bound (absent) on an integer type becomes its extreme.
template <class T>
T bound(double v) {
  if (std::isinf(v) && !std::numeric_limits<T>::has_infinity)
    return v < 0 ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

template <class T>
void unary_cpu_typed(UnaryOp op, const UnaryParams& p, const Tensor& out, const Tensor& x) {
  auto run = [&](auto f) { unary_loop<T>(out, x, f); };
  // Only the floating types reach the array ops (runs_on_integers).
  auto vec = [&](auto f) {
    if constexpr (std::is_floating_point_v<T>) array_loop<T>(out, f, x);
  };
  const T s = static_cast<T>(p.scalar);
  switch (op) {
    // int64's lowest value negates to itself, as PyTorch's (in uint64: no signed overflow).
    case UnaryOp::Neg: return run([](T v) { return static_cast<T>(-static_cast<Wrap<T>>(v)); });
    case UnaryOp::Exp: return vec([](const auto& v) { return vec::exp(v); });
    case UnaryOp::Log: return vec([](const auto& v) { return vec::log(v); });
    case UnaryOp::Sqrt: return run([](T v) { return static_cast<T>(std::sqrt(v)); });
    case UnaryOp::Rsqrt: return run([](T v) { return static_cast<T>(1 / std::sqrt(v)); });
    case UnaryOp::Abs:  // floating: std::abs, so abs(-0) is +0 as PyTorch's
      if constexpr (std::is_floating_point_v<T>) return run([](T v) { return std::abs(v); });
      else return run([](T v) { return static_cast<T>(v < 0 ? -static_cast<Wrap<T>>(v) : v); });
    case UnaryOp::Pow:
      if (p.scalar == 2.0) return run([](T v) { return static_cast<T>(v * v); });
      return run([s](T v) { return static_cast<T>(std::pow(v, s)); });
    case UnaryOp::Clamp: {
      const T lo = bound<T>(p.lo), hi = bound<T>(p.hi);
      // NaN stays NaN; lo > hi gives hi everywhere, as PyTorch.
      return run([lo, hi](T v) {
        const T up = v < lo ? lo : v;
        return up > hi ? hi : up;
      });
    }
    case UnaryOp::Relu: return run([](T v) { return v < 0 ? T(0) : v; });
    case UnaryOp::LeakyRelu: return run([s](T v) { return v > 0 ? v : static_cast<T>(v * s); });
    case UnaryOp::Sigmoid: return vec([](const auto& v) { return vec::sigmoid(v); });
    case UnaryOp::Tanh: return vec([](const auto& v) { return v.tanh(); });
    case UnaryOp::Gelu: return vec([](const auto& v) { return T(0.5) * v * (T(1) + (v * T(kSqrt1_2)).erf()); });
    case UnaryOp::GeluTanh:
      return vec([](const auto& v) {
        return T(0.5) * v * (T(1) + (T(kSqrt2OverPi) * (v + T(kGeluC) * v.cube())).tanh());
      });
  }
}

template <class T>
void unary_backward_cpu_typed(UnaryOp op, const UnaryParams& p, const Tensor& dx, const Tensor& grad,
                              const Tensor& saved) {
  auto run = [&](auto f) { backward_loop<T>(dx, grad, saved, f); };
  auto vec = [&](auto f) {
    if constexpr (std::is_floating_point_v<T>) array_loop<T>(dx, f, grad, saved);
  };
  const T s = static_cast<T>(p.scalar);
  switch (op) {
    case UnaryOp::Neg: return run([](T g, T) { return -g; });
    case UnaryOp::Exp: return vec([](const auto& g, const auto& y) { return g * y; });
    case UnaryOp::Log: return vec([](const auto& g, const auto& x) { return g / x; });
    case UnaryOp::Sqrt: return run([](T g, T y) { return g / (2 * y); });
    case UnaryOp::Rsqrt: return run([](T g, T y) { return T(-0.5) * g * y * y * y; });
    case UnaryOp::Abs: return run([](T g, T x) { return x > 0 ? g : x < 0 ? -g : T(0); });
    case UnaryOp::Pow:
      if (p.scalar == 0.0) return run([](T, T) { return T(0); });  // not 0 * x^-1 (NaN at 0)
      return run([s](T g, T x) { return g * s * std::pow(x, s - 1); });
    case UnaryOp::Clamp: {
      // Strictly inside, as PyTorch 2.x with scalar bounds: a clamped-to-the-bound
      // element gets 0, even when x sat exactly on the bound.
      const bool has_lo = !std::isinf(p.lo), has_hi = !std::isinf(p.hi);
      const T lo = static_cast<T>(p.lo), hi = static_cast<T>(p.hi);
      return run([=](T g, T x) { return ((!has_lo || x > lo) && (!has_hi || x < hi)) ? g : T(0); });
    }
    case UnaryOp::Relu: return run([](T g, T y) { return y <= 0 ? T(0) : g; });  // NaN passes g, as PyTorch
    case UnaryOp::LeakyRelu: return run([s](T g, T x) { return x > 0 ? g : g * s; });
    case UnaryOp::Sigmoid: return vec([](const auto& g, const auto& y) { return g * y * (T(1) - y); });
    case UnaryOp::Tanh: return vec([](const auto& g, const auto& y) { return g * (T(1) - y.square()); });
    case UnaryOp::Gelu:
      return vec([](const auto& g, const auto& x) {
        const auto cdf = T(0.5) * (T(1) + (x * T(kSqrt1_2)).erf());
        const auto pdf = T(kInvSqrt2Pi) * vec::exp(T(-0.5) * x.square());
        return g * (cdf + x * pdf);
      });
    case UnaryOp::GeluTanh:
      // t is computed twice (an Eigen expression does not share subexpressions);
      // packet tanh is cheap next to the memory traffic.
      return vec([](const auto& g, const auto& x) {
        const auto t = (T(kSqrt2OverPi) * (x + T(kGeluC) * x.cube())).tanh();
        const auto dinner = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluC) * x.square());
        return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t.square()) * dinner);
      });
  }
}

void unary_cpu(UnaryOp op, const UnaryParams& p, const Tensor& out, const Tensor& x) {
  if (runs_on_integers(op)) {
    MINIDL_DISPATCH_ALL(x.dtype(), unary_op_name(op), [&] { unary_cpu_typed<scalar_t>(op, p, out, x); });
  } else {
    MINIDL_DISPATCH_FLOATING(x.dtype(), unary_op_name(op), [&] { unary_cpu_typed<scalar_t>(op, p, out, x); });
  }
}

void unary_backward_cpu(UnaryOp op, const UnaryParams& p, const Tensor& dx, const Tensor& grad,
                        const Tensor& saved) {
  MINIDL_DISPATCH_FLOATING(grad.dtype(), unary_op_name(op),
                           [&] { unary_backward_cpu_typed<scalar_t>(op, p, dx, grad, saved); });
}

// relu on the 16-bit types, on their bits (a loop the compiler vectorizes,
// which float conversions and struct selects were not): v < 0 is sign set,
// not -0, not NaN (magnitude above the infinity's bits Inf). Inf is a
// template constant: a captured uint16_t may alias the output, which stops
// the vectorizer.
template <uint16_t Inf>
void relu_bits(const Tensor& out, const Tensor& x) {
  unary_loop<uint16_t>(out, x, [](uint16_t v) -> uint16_t {
    const uint16_t m = v & 0x7FFF;
    const bool negative = (v & 0x8000) != 0 && m != 0 && m <= Inf;
    return negative ? 0 : v;
  });
}

// dx = y <= 0 ? 0 : g (a NaN y passes g, as PyTorch's threshold_backward).
template <uint16_t Inf>
void relu_backward_bits(const Tensor& dx, const Tensor& grad, const Tensor& saved) {
  backward_loop<uint16_t>(dx, grad, saved, [](uint16_t g, uint16_t y) -> uint16_t {
    const uint16_t m = y & 0x7FFF;
    const bool not_positive = m == 0 || ((y & 0x8000) != 0 && m <= Inf);
    return not_positive ? 0 : g;
  });
}

bool relu_half(UnaryOp op, const Tensor& out, const Tensor& x) {
  if (op != UnaryOp::Relu || out.dtype() != x.dtype()) return false;
  if (x.dtype() == kBFloat16) return relu_bits<0x7F80>(out, x), true;
  if (x.dtype() == kFloat16) return relu_bits<0x7C00>(out, x), true;
  return false;
}

bool relu_backward_half(UnaryOp op, const Tensor& dx, const Tensor& grad, const Tensor& saved) {
  if (op != UnaryOp::Relu || dx.dtype() != grad.dtype() || saved.dtype() != grad.dtype()) return false;
  if (grad.dtype() == kBFloat16) return relu_backward_bits<0x7F80>(dx, grad, saved), true;
  if (grad.dtype() == kFloat16) return relu_backward_bits<0x7C00>(dx, grad, saved), true;
  return false;
}

void unary_any_cpu(UnaryOp op, const UnaryParams& p, const Tensor& out, const Tensor& x) {
  if (!relu_half(op, out, x)) cpu::Float32Compute<unary_cpu, 2>::run(op, p, out, x);
}

void unary_backward_any_cpu(UnaryOp op, const UnaryParams& p, const Tensor& dx, const Tensor& grad,
                            const Tensor& saved) {
  if (!relu_backward_half(op, dx, grad, saved)) cpu::Float32Compute<unary_backward_cpu, 2>::run(op, p, dx, grad, saved);
}

}  // namespace

void register_unary_cpu_kernels() {
  unary_stub.set(DeviceType::CPU, unary_any_cpu);
  unary_backward_stub.set(DeviceType::CPU, unary_backward_any_cpu);
}

}  // namespace minidl
