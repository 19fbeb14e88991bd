// Helpers shared by tests/test_elementwise.cpp and tests/test_elementwise_unary.cpp:
// an elementwise tolerance check in which NaN matches NaN, and float64 leaves.
#pragma once

#include <cmath>
#include <vector>

#include "minidl/minidl.h"

namespace minidl::testing {

inline bool values_near(const Tensor& t, const std::vector<double>& expected, double tol = 1e-6) {
  const std::vector<double> v = t.to_vector<double>();
  if (v.size() != expected.size()) return false;
  for (size_t i = 0; i < v.size(); ++i) {
    const bool same = v[i] == expected[i] || (std::isnan(v[i]) && std::isnan(expected[i]));
    if (!same && !(std::abs(v[i] - expected[i]) <= tol * (1 + std::abs(expected[i])))) return false;
  }
  return true;
}

inline Tensor randn64(const Shape& shape) { return randn(shape, kFloat64).requires_grad_(); }

}  // namespace minidl::testing
