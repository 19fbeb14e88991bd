// Pooling on channels-last (NHWC) inputs against NCHW pooling on the CPU,
// case by case: every 2-D pool (max and avg windows with padding, dilation,
// ceil_mode, count_include_pad and divisor_override; adaptive max and avg;
// global average) on inputs with ties, a NaN and a window of -inf only.
// tests/test_pooling_channels_last.cpp runs it on the CPU and the test
// device, tests/test_cuda_channels_last.cpp on a GPU.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "minidl/minidl.h"

namespace minidl::testing {


// A pool under test: (output, indices or an undefined tensor).
using Pool = std::function<std::tuple<Tensor, Tensor>(const Tensor&)>;

struct PoolCase {
  std::string name;
  Pool pool;
  bool exact_float64 = true;  // global averages sum a plane in another order
};

inline std::vector<PoolCase> pool_cases() {
  auto avg = [](auto f) { return [f](const Tensor& x) { return std::make_tuple(f(x), Tensor()); }; };
  return {
      {"max 2x2", [](const Tensor& x) { return max_pool2d_with_indices(x, {2, 2}); }},
      {"max 3x3 stride 2 pad 1", [](const Tensor& x) { return max_pool2d_with_indices(x, {3, 3}, {2, 2}, {1, 1}); }},
      {"max 3x2 stride 1 dilation 2 ceil",
       [](const Tensor& x) { return max_pool2d_with_indices(x, {3, 2}, {1, 2}, {1, 1}, {2, 2}, true); }},
      {"adaptive max 3x2", [](const Tensor& x) { return adaptive_max_pool2d_with_indices(x, {3, 2}); }},
      {"avg 3x3 stride 1 pad 1", avg([](const Tensor& x) { return avg_pool2d(x, {3, 3}, {1, 1}, {1, 1}); })},
      {"avg 3x3 stride 2 pad 1 exclude pad ceil",
       avg([](const Tensor& x) { return avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, true, false); })},
      {"avg 2x2 divisor 3", avg([](const Tensor& x) { return avg_pool2d(x, {2, 2}, {0, 0}, {0, 0}, false, true, 3); })},
      {"adaptive avg 3x2", avg([](const Tensor& x) { return adaptive_avg_pool2d(x, {3, 2}); })},
      {"global avg", avg([](const Tensor& x) { return adaptive_avg_pool2d(x, {1, 1}); }), false},
  };
}

// Element by element to `tol` relative (absolute below 1; 0: bit for bit), NaN equal to NaN.
inline bool same_values(const Tensor& a, const Tensor& b, double tol = 0.0) {
  if (a.shape() != b.shape()) return false;
  const std::vector<double> u = a.to(kFloat64).to_vector<double>(), v = b.to(kFloat64).to_vector<double>();
  for (size_t i = 0; i < u.size(); ++i)
    if (!(u[i] == v[i] || (std::isnan(u[i]) && std::isnan(v[i])) || std::abs(u[i] - v[i]) <= tol * std::max(std::abs(v[i]), 1.0)))
      return false;
  return true;
}

struct PoolRun {
  Tensor y, indices, grad;
};

// Forward and backward (dy given) of `pool` on x laid out as `fmt` on `device`.
inline PoolRun run_pool(const PoolCase& c, const Tensor& x_host, const Tensor& dy_host, MemoryFormat fmt, Device device) {
  const Tensor x = x_host.to(device).contiguous(fmt).detach().requires_grad_(true);
  auto [y, indices] = c.pool(x);
  y.backward(dy_host.to(device).contiguous(fmt));
  return {y, indices, x.grad()};
}

// Channels-last on `device` against NCHW on the CPU for every case on
// (2, channels, 7, 6) in `dtype`: values and gradients to a relative `tol`
// (0: bit for bit; global averages of float64 to 1e-15 regardless), argmax
// indices equal, layouts channels-last.
inline void check_pool_cases(DType dtype, int64_t channels, Device device, double tol) {
  manual_seed(static_cast<uint64_t>(channels) + 31);
  const Tensor r = randn({2, channels, 7, 6});
  std::vector<float> v = r.to_vector<float>();
  for (float& e : v) e = std::round(e * 2.0f) * 0.5f;  // many ties (exact in every dtype)
  v[5] = NAN;                                  // a NaN wins its windows
  for (int i = 40; i < 48; ++i) v[i] = -INFINITY;  // a window of -inf only: the first tap's index
  const Tensor x = tensor(v, r.shape()).to(dtype);
  for (const PoolCase& c : pool_cases()) {
    INFO(c.name, ", ", std::string(dtype_name(dtype)), ", C = ", channels, " on ", device.str());
    const Tensor dy_shape = std::get<0>(c.pool(x));
    const Tensor dy = randn(dy_shape.shape()).to(dtype);
    const PoolRun ref = run_pool(c, x, dy, MemoryFormat::Contiguous, kCPU);
    const PoolRun got = run_pool(c, x, dy, MemoryFormat::ChannelsLast, device);
    CHECK(got.y.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(got.grad.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(got.y.device() == device);
    const double t = c.exact_float64 || dtype != kFloat64 ? tol : std::max(tol, 1e-15);
    CHECK(same_values(got.y.to(kCPU), ref.y, t));
    CHECK(same_values(got.grad.to(kCPU), ref.grad, t));
    if (ref.indices.defined()) {
      CHECK(got.indices.is_contiguous(MemoryFormat::ChannelsLast));
      CHECK(got.indices.to(kCPU).to_vector<int64_t>() == ref.indices.to_vector<int64_t>());
    }
  }
}

}  // namespace minidl::testing
