// CPU kernels of the elementwise binary ops (ops/binary.h's kernel interface):
// strided loops with fast paths for the contiguous and broadcast-scalar
// layouts, tensor-scalar ops, the broadcast-gradient reduction of
// sum_to_shape, and fill_. add, sub, mul and div of two float16/bfloat16
// tensors read and write them directly (float32 math, one rounding: what
// Float32Compute's widened copies gave, without the copies); the rest of the
// 16-bit ops go through Float32Compute.
#include <cmath>
#include <limits>
#include <type_traits>

#include "minidl/core/half.h"
#include "minidl/ops/binary.h"
#include "minidl/ops/cpu/float32_compute.h"
#include "minidl/ops/cpu/strided_loop.h"

namespace minidl {

namespace {

// ---- CPU kernels ---------------------------------------------------------------

// out[i] = f(a[i], b[i]) over out's shape; the common layouts (all contiguous,
// one side a broadcast scalar along the row) get loops the compiler vectorizes.
template <class T, class F>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  T* o = static_cast<T*>(out.raw_data());
  const T* x = static_cast<const T*>(a.raw_data());
  const T* y = static_cast<const T*>(b.raw_data());
  for_each_row<3>(out.shape(), {out.strides(), a.strides(), b.strides()},
                  [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& step) {
                    T* po = o + off[0];
                    const T* px = x + off[1];
                    const T* py = y + off[2];
                    if (step[0] == 1 && step[1] == 1 && step[2] == 1) {
                      for (int64_t i = 0; i < n; ++i) po[i] = f(px[i], py[i]);
                    } else if (step[0] == 1 && step[1] == 1 && step[2] == 0) {
                      const T s = py[0];
                      for (int64_t i = 0; i < n; ++i) po[i] = f(px[i], s);
                    } else if (step[0] == 1 && step[1] == 0 && step[2] == 1) {
                      const T s = px[0];
                      for (int64_t i = 0; i < n; ++i) po[i] = f(s, py[i]);
                    } else {
                      for (int64_t i = 0; i < n; ++i) po[i * step[0]] = f(px[i * step[1]], py[i * step[2]]);
                    }
                  });
}

// Calls run(f) with the elementwise function of `op`; alpha scales b in add/sub.
// int64 add, sub and mul wrap around modulo 2^64 as PyTorch's (computed in
// uint64: signed overflow would be undefined behaviour).
template <class T, class Run>
void with_op(BinaryOp op, double alpha, Run run) {
  using W = std::conditional_t<std::is_same_v<T, int64_t>, uint64_t, T>;
  const W s = static_cast<W>(static_cast<T>(alpha));  // callers checked that alpha fits T
  switch (op) {
    case BinaryOp::Add:
      if (alpha == 1.0) return run([](T x, T y) { return static_cast<T>(W(x) + W(y)); });
      return run([s](T x, T y) { return static_cast<T>(W(x) + s * W(y)); });
    case BinaryOp::Sub:
      if (alpha == 1.0) return run([](T x, T y) { return static_cast<T>(W(x) - W(y)); });
      return run([s](T x, T y) { return static_cast<T>(W(x) - s * W(y)); });
    case BinaryOp::Mul: return run([](T x, T y) { return static_cast<T>(W(x) * W(y)); });
    case BinaryOp::Div: return run([](T x, T y) { return static_cast<T>(x / y); });
    // NaN wins, as in PyTorch (x != x only for NaN).
    case BinaryOp::Maximum: return run([](T x, T y) { return (x > y || x != x) ? x : y; });
    case BinaryOp::Minimum: return run([](T x, T y) { return (x < y || x != x) ? x : y; });
    case BinaryOp::Eq: return run([](T x, T y) { return static_cast<T>(x == y); });
    case BinaryOp::Gt: return run([](T x, T y) { return static_cast<T>(x > y); });
    case BinaryOp::Lt: return run([](T x, T y) { return static_cast<T>(x < y); });
  }
}

template <class T>
void binary_cpu_typed(BinaryOp op, double alpha, const Tensor& out, const Tensor& a, const Tensor& b) {
  with_op<T>(op, alpha, [&](auto f) { binary_loop<T>(out, a, b, f); });
}

// out[i] = f(a[i], s) or f(s, a[i]): the same loops as a broadcast 0-d operand,
// so the results are the same bits.
template <class T>
void binary_scalar_cpu_typed(BinaryOp op, const Tensor& out, const Tensor& a, double scalar, bool scalar_first) {
  const T s = static_cast<T>(scalar);
  T* o = static_cast<T*>(out.raw_data());
  const T* x = static_cast<const T*>(a.raw_data());
  with_op<T>(op, 1.0, [&](auto f) {
    for_each_row<2>(out.shape(), {out.strides(), a.strides()},
                    [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& step) {
                      T* po = o + off[0];
                      const T* px = x + off[1];
                      if (step[0] == 1 && step[1] == 1) {
                        if (scalar_first) {
                          for (int64_t i = 0; i < n; ++i) po[i] = f(s, px[i]);
                        } else {
                          for (int64_t i = 0; i < n; ++i) po[i] = f(px[i], s);
                        }
                      } else {
                        for (int64_t i = 0; i < n; ++i)
                          po[i * step[0]] = scalar_first ? f(s, px[i * step[1]]) : f(px[i * step[1]], s);
                      }
                    });
  });
}

void binary_scalar_cpu(BinaryOp op, const Tensor& out, const Tensor& a, double scalar, bool scalar_first) {
  if (op == BinaryOp::Div) {
    MINIDL_DISPATCH_FLOATING(out.dtype(), "div",
                             [&] { binary_scalar_cpu_typed<scalar_t>(op, out, a, scalar, scalar_first); });
  } else {
    MINIDL_DISPATCH_ALL(out.dtype(), binary_op_name(op),
                        [&] { binary_scalar_cpu_typed<scalar_t>(op, out, a, scalar, scalar_first); });
  }
}

void binary_cpu(BinaryOp op, double alpha, const Tensor& out, const Tensor& a, const Tensor& b) {
  if (op == BinaryOp::Div) {  // integer division (and its division by zero) is not offered
    MINIDL_DISPATCH_FLOATING(out.dtype(), "div", [&] { binary_cpu_typed<scalar_t>(op, alpha, out, a, b); });
  } else {
    MINIDL_DISPATCH_ALL(out.dtype(), binary_op_name(op),
                        [&] { binary_cpu_typed<scalar_t>(op, alpha, out, a, b); });
  }
}

// Serial on purpose: several grad rows add into the same output element.
template <class T>
void sum_to_cpu_typed(const Tensor& out_view, const Tensor& grad) {
  using acc_t = std::conditional_t<std::is_floating_point_v<T>, double, T>;
  T* o = static_cast<T*>(out_view.raw_data());
  const T* g = static_cast<const T*>(grad.raw_data());
  for_each_row<2>(
      grad.shape(), {out_view.strides(), grad.strides()},
      [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& step) {
        T* po = o + off[0];
        const T* pg = g + off[1];
        if (step[0] == 0) {  // the whole row reduces into one element
          // Eight independent partial sums: one running sum would wait on the
          // latency of every add.
          acc_t part[8] = {};
          int64_t i = 0;
          for (; i + 8 <= n; i += 8)
            for (int k = 0; k < 8; ++k) part[k] += pg[(i + k) * step[1]];
          acc_t acc = 0;
          for (; i < n; ++i) acc += pg[i * step[1]];
          for (int k = 0; k < 8; ++k) acc += part[k];
          *po = static_cast<T>(*po + acc);
        } else {
          for (int64_t i = 0; i < n; ++i) po[i * step[0]] = static_cast<T>(po[i * step[0]] + pg[i * step[1]]);
        }
      },
      std::numeric_limits<int64_t>::max());
}

void sum_to_cpu(const Tensor& out_view, const Tensor& grad) {
  MINIDL_DISPATCH_ALL(grad.dtype(), "sum_to_shape", [&] { sum_to_cpu_typed<scalar_t>(out_view, grad); });
}

void fill_cpu(const Tensor& out, double value) {
  MINIDL_DISPATCH_ALL_AND_HALF(out.dtype(), "fill_", [&] {
    scalar_t* o = static_cast<scalar_t*>(out.raw_data());
    const auto v = convert<scalar_t>(value);
    for_each_row<1>(out.shape(), {out.strides()},
                    [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& step) {
                      for (int64_t i = 0; i < n; ++i) o[off[0] + i * step[0]] = v;
                    });
  });
}

template <class T>
void arithmetic_half(BinaryOp op, double alpha, const Tensor& out, const Tensor& a, const Tensor& b) {
  const float s = static_cast<float>(alpha);
  auto run = [&](auto f) { binary_loop<T>(out, a, b, f); };
  auto F = [](T v) { return static_cast<float>(v); };
  switch (op) {
    case BinaryOp::Add:
      if (alpha == 1.0) return run([F](T x, T y) { return T(F(x) + F(y)); });
      return run([F, s](T x, T y) { return T(F(x) + s * F(y)); });
    case BinaryOp::Sub:
      if (alpha == 1.0) return run([F](T x, T y) { return T(F(x) - F(y)); });
      return run([F, s](T x, T y) { return T(F(x) - s * F(y)); });
    case BinaryOp::Mul: return run([F](T x, T y) { return T(F(x) * F(y)); });
    case BinaryOp::Div: return run([F](T x, T y) { return T(F(x) / F(y)); });
    default: MINIDL_ASSERT(false);
  }
}

void binary_any_cpu(BinaryOp op, double alpha, const Tensor& out, const Tensor& a, const Tensor& b) {
  const bool arithmetic = op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul || op == BinaryOp::Div;
  if (arithmetic && a.dtype() == out.dtype() && b.dtype() == out.dtype()) {
    if (out.dtype() == kBFloat16) return arithmetic_half<BFloat16>(op, alpha, out, a, b);
    if (out.dtype() == kFloat16) return arithmetic_half<Half>(op, alpha, out, a, b);
  }
  cpu::Float32Compute<binary_cpu, 2>::run(op, alpha, out, a, b);
}

}  // namespace

void register_binary_cpu_kernels() {
  binary_stub.set(DeviceType::CPU, binary_any_cpu);
  binary_scalar_stub.set(DeviceType::CPU, cpu::Float32Compute<binary_scalar_cpu, 1>::run);
  sum_to_stub.set(DeviceType::CPU, cpu::Float32Compute<sum_to_cpu, 0>::run);
  fill_stub.set(DeviceType::CPU, fill_cpu);
}

}  // namespace minidl
