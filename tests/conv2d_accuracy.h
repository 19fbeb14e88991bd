// float32 error of a conv2d path against a float64 reference (the same
// inputs, rounded to float32 first, through the direct im2col path in
// float64), forward, grad input or grad weight. Shared by tests/test_conv2d_winograd.cpp
// (the bound) and bench/bench_conv_accuracy.cpp (the table behind it).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "minidl/ops/cpu/conv2d_kernels.h"

namespace minidl::testing {

struct Conv2dError {
  // max_i |e_i| / (u * S_i): e_i the error of output i, u = 2^-24 (float32's
  // unit roundoff), S_i = sum |w| |x| over the terms of output i (the scale
  // of the classic bound |e_i| <= gamma_n S_i of a sum of products; for
  // grad weight, S_i = sum |dy| |x| over its terms).
  double max_u = 0;
  double rms_rel = 0;  // sqrt(sum e_i^2 / sum ref_i^2)
  double max_rel = 0;  // max_i |e_i| / max_i |ref_i|
};

// x and dy unit normal, w uniform in +-1/sqrt(fan_in) (PyTorch's default
// init of Conv2d), from `seed`.
inline Conv2dError conv2d_float32_error(const Conv2dGeometry& g, Conv2dAlgo algo, Conv2dPass pass, uint64_t seed) {
  const int64_t Cg = g.in_channels / g.groups;
  const size_t x_size = static_cast<size_t>(g.batch * g.in_channels * g.in_h * g.in_w);
  const size_t y_size = static_cast<size_t>(g.batch * g.out_channels * g.out_h * g.out_w);
  const size_t w_size = static_cast<size_t>(g.out_channels * Cg * g.kernel_h * g.kernel_w);
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal;
  const float bound = 1.0f / std::sqrt(static_cast<float>(Cg * g.kernel_h * g.kernel_w));
  std::uniform_real_distribution<float> uniform(-bound, bound);
  // in: x (forward, grad weight) or dy; w: w or, for grad weight, dy.
  const bool weight = pass == Conv2dPass::kWeight;
  std::vector<float> in(pass == Conv2dPass::kInput ? y_size : x_size), w(weight ? y_size : w_size);
  std::vector<float> out(pass == Conv2dPass::kForward ? y_size : pass == Conv2dPass::kInput ? x_size : w_size);
  for (float& v : in) v = normal(gen);
  for (float& v : w) v = weight ? normal(gen) : uniform(gen);
  std::vector<double> in_d(in.begin(), in.end()), w_d(w.begin(), w.end()), ref(out.size()), mag(out.size());
  auto run = [&](auto* i, auto* wt, auto* o, Conv2dAlgo a) {
    if (pass == Conv2dPass::kInput)
      conv2d_backward_input_kernel(g, i, wt, o, a);
    else if (weight)
      conv2d_backward_weight_kernel(g, wt, i, o, static_cast<decltype(o)>(nullptr), a);
    else
      conv2d_forward_kernel(g, i, wt, static_cast<decltype(i)>(nullptr), o, a);
  };
  run(in.data(), w.data(), out.data(), algo);
  run(in_d.data(), w_d.data(), ref.data(), Conv2dAlgo::kIm2colGemm);
  for (double& v : in_d) v = std::abs(v);
  for (double& v : w_d) v = std::abs(v);
  run(in_d.data(), w_d.data(), mag.data(), Conv2dAlgo::kIm2colGemm);
  constexpr double u = 0x1p-24;
  Conv2dError r;
  double e2 = 0, r2 = 0, ref_max = 0, e_max = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double e = std::abs(static_cast<double>(out[i]) - ref[i]);
    if (mag[i] > 0) r.max_u = std::max(r.max_u, e / (u * mag[i]));
    e2 += e * e, r2 += ref[i] * ref[i];
    e_max = std::max(e_max, e), ref_max = std::max(ref_max, std::abs(ref[i]));
  }
  r.rms_rel = r2 > 0 ? std::sqrt(e2 / r2) : 0;
  r.max_rel = ref_max > 0 ? e_max / ref_max : 0;
  return r;
}

}  // namespace minidl::testing
