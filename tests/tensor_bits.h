// Bit-for-bit comparison of two tensors of one shape, for kernels that must
// reproduce another path's results exactly (16-bit kernels against float32
// computation rounded once): elements that differ in value, NaN-ness or the
// sign of zero, the first three reported.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "minidl/minidl.h"

namespace minidl::testing {

inline int64_t count_different_bits(const Tensor& got, const Tensor& want) {
  REQUIRE(got.shape() == want.shape());
  const std::vector<float> g = got.to(kFloat32).contiguous().to_vector<float>();
  const std::vector<float> w = want.to(kFloat32).contiguous().to_vector<float>();
  int64_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool same = std::isnan(g[i]) ? std::isnan(w[i]) : (g[i] == w[i] && std::signbit(g[i]) == std::signbit(w[i]));
    if (!same) {
      if (bad < 3) MESSAGE("element ", i, ": ", g[i], " want ", w[i]);
      ++bad;
    }
  }
  return bad;
}

}  // namespace minidl::testing
