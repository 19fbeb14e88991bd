// CPU kernels of the elementwise unary ops and activations (ops/unary.h's
// kernel interface): forward y = f(x) and backward dx = g * f'(.) from the
// saved x or y, as the table at the top of ops/unary.cpp lists.
// relu on float16/bfloat16 reads and writes them directly (its result is the
// input or 0, exact in any type); every other op on them goes through
// Float32Compute.
#include <cmath>
#include <cstdint>
#include <limits>

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
  const T s = static_cast<T>(p.scalar);
  switch (op) {
    case UnaryOp::Neg: return run([](T v) { return static_cast<T>(-v); });
    case UnaryOp::Exp: return run([](T v) { return static_cast<T>(std::exp(v)); });
    case UnaryOp::Log: return run([](T v) { return static_cast<T>(std::log(v)); });
    case UnaryOp::Sqrt: return run([](T v) { return static_cast<T>(std::sqrt(v)); });
    case UnaryOp::Rsqrt: return run([](T v) { return static_cast<T>(1 / std::sqrt(v)); });
    case UnaryOp::Abs: return run([](T v) { return static_cast<T>(v < 0 ? -v : v); });
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
    case UnaryOp::Sigmoid: return run([](T v) { return static_cast<T>(1 / (1 + std::exp(-v))); });
    case UnaryOp::Tanh: return run([](T v) { return static_cast<T>(std::tanh(v)); });
    case UnaryOp::Gelu:
      return run([](T v) { return static_cast<T>(T(0.5) * v * (1 + std::erf(v * T(kSqrt1_2)))); });
    case UnaryOp::GeluTanh:
      return run([](T v) {
        return static_cast<T>(T(0.5) * v * (1 + std::tanh(T(kSqrt2OverPi) * (v + T(kGeluC) * v * v * v))));
      });
  }
}

template <class T>
void unary_backward_cpu_typed(UnaryOp op, const UnaryParams& p, const Tensor& dx, const Tensor& grad,
                              const Tensor& saved) {
  auto run = [&](auto f) { backward_loop<T>(dx, grad, saved, f); };
  const T s = static_cast<T>(p.scalar);
  switch (op) {
    case UnaryOp::Neg: return run([](T g, T) { return -g; });
    case UnaryOp::Exp: return run([](T g, T y) { return g * y; });
    case UnaryOp::Log: return run([](T g, T x) { return g / x; });
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
    case UnaryOp::Relu: return run([](T g, T y) { return y > 0 ? g : T(0); });
    case UnaryOp::LeakyRelu: return run([s](T g, T x) { return x > 0 ? g : g * s; });
    case UnaryOp::Sigmoid: return run([](T g, T y) { return g * y * (1 - y); });
    case UnaryOp::Tanh: return run([](T g, T y) { return g * (1 - y * y); });
    case UnaryOp::Gelu:
      return run([](T g, T x) {
        const T cdf = T(0.5) * (1 + std::erf(x * T(kSqrt1_2)));
        const T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
        return g * (cdf + x * pdf);
      });
    case UnaryOp::GeluTanh:
      return run([](T g, T x) {
        const T t = std::tanh(T(kSqrt2OverPi) * (x + T(kGeluC) * x * x * x));
        const T dinner = T(kSqrt2OverPi) * (1 + 3 * T(kGeluC) * x * x);
        return g * (T(0.5) * (1 + t) + T(0.5) * x * (1 - t * t) * dinner);
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

// dx = y > 0 ? g : 0.
template <uint16_t Inf>
void relu_backward_bits(const Tensor& dx, const Tensor& grad, const Tensor& saved) {
  backward_loop<uint16_t>(dx, grad, saved, [](uint16_t g, uint16_t y) -> uint16_t {
    const bool positive = (y & 0x8000) == 0 && y != 0 && y <= Inf;
    return positive ? g : 0;
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
