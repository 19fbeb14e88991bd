// Shared test helpers: the float64 finite-difference gradient checker used by
// every op test, closeness checks, and error-message checks.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "minidl/minidl.h"

namespace minidl::testing {

// The offset of the element with row-major index i of `shape` under
// `strides`, by unravelling i: the reference for the strided loops.
inline int64_t element_offset(const Shape& shape, const Shape& strides, int64_t i) {
  int64_t off = 0;
  for (size_t d = shape.size(); d-- > 0;) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

// Checks backward against central differences. `inputs` are float64 leaves
// (those with requires_grad are checked). The scalar checked is
// L = sum(f(inputs) * probe) for a fixed random probe, so every output element
// contributes with its own weight; each input element is perturbed by +-eps.
inline void check_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                            std::vector<Tensor> inputs, double eps = 1e-6, double atol = 1e-6,
                            double rtol = 1e-4) {
  for (const Tensor& t : inputs) REQUIRE_MESSAGE(t.dtype() == kFloat64, "gradcheck wants float64 inputs");
  for (Tensor& t : inputs) t.set_grad(Tensor());
  Tensor y = f(inputs);
  REQUIRE(y.dtype() == kFloat64);
  Generator probe_gen(1234);
  std::vector<double> probe(static_cast<size_t>(y.numel()));
  for (double& p : probe) p = probe_gen.normal();
  auto loss = [&](const Tensor& out) {
    std::vector<double> v = out.to_vector<double>();
    double s = 0.0;
    for (size_t i = 0; i < v.size(); ++i) s += v[i] * probe[i];
    return s;
  };
  y.backward(tensor(probe, {y.numel()}, kFloat64).reshape(y.shape()));  // reshape keeps 0-d outputs 0-d

  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor x = inputs[k];
    if (!x.requires_grad()) continue;
    Tensor analytic = x.grad();
    std::vector<double> a = analytic.defined() ? analytic.to_vector<double>()
                                               : std::vector<double>(static_cast<size_t>(x.numel()), 0.0);
    REQUIRE(x.is_contiguous());
    double* data = x.data_ptr<double>();
    NoGradGuard no_grad;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double orig = data[i];
      data[i] = orig + eps;
      const double up = loss(f(inputs));
      data[i] = orig - eps;
      const double down = loss(f(inputs));
      data[i] = orig;
      const double numeric = (up - down) / (2 * eps);
      const bool ok = std::abs(numeric - a[i]) <= atol + rtol * std::abs(numeric);
      if (!ok) {
        FAIL_CHECK("gradient mismatch for input ", k, " element ", i, ": analytic ", a[i],
                   ", numeric ", numeric);
        return;
      }
    }
  }
}

// max |a - b| <= atol + rtol * |b| elementwise; same shape.
inline bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-6) {
  if (a.shape() != b.shape()) return false;
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i]))) return false;  // equal infinities too
  return true;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0.0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// Winograd F(4x4) off for a scope (backends::cpu::set_conv_allow_winograd4),
// restored however the scope ends: bfloat16 3x3 stride-1 convs then keep the
// dot products instead of float32 Winograd (ops/cpu/conv2d.cpp).
struct NoWinograd4 {
  NoWinograd4() { backends::cpu::set_conv_allow_winograd4(false); }
  ~NoWinograd4() { backends::cpu::set_conv_allow_winograd4(true); }
  NoWinograd4(const NoWinograd4&) = delete;
  NoWinograd4& operator=(const NoWinograd4&) = delete;
};

// bfloat16's AVX512-BF16 dot products off for a scope (MINIDL_CPU_BF16_DOT=0,
// ops/cpu/bf16_gemm.h): bfloat16 conv2d, linear and matmul take the paths a
// CPU without them takes.
struct NoBf16Dot {
  NoBf16Dot() { setenv("MINIDL_CPU_BF16_DOT", "0", 1); }
  ~NoBf16Dot() { unsetenv("MINIDL_CPU_BF16_DOT"); }
  NoBf16Dot(const NoBf16Dot&) = delete;
  NoBf16Dot& operator=(const NoBf16Dot&) = delete;
};

// A dataset of n samples: data i as a (1,) float32 row, target i.
inline std::shared_ptr<data::TensorDataset> numbers_dataset(int64_t n) {
  return std::make_shared<data::TensorDataset>(arange(static_cast<double>(n)).reshape({n, 1}),
                                               arange(static_cast<double>(n), TensorOptions(kInt64)));
}

}  // namespace minidl::testing

// Checks that `expr` throws minidl::Error whose message contains `substr`.
#define CHECK_THROWS_CONTAINS(expr, substr)                                          \
  do {                                                                               \
    bool threw_ = false;                                                             \
    try {                                                                            \
      (void)(expr);                                                                  \
    } catch (const ::minidl::Error& e_) {                                            \
      threw_ = true;                                                                 \
      const std::string what_ = e_.what();                                           \
      CHECK_MESSAGE(what_.find(substr) != std::string::npos, "message was: ", what_); \
    }                                                                                \
    CHECK_MESSAGE(threw_, "expected minidl::Error from " #expr);                     \
  } while (0)
