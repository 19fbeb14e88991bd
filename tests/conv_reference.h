// Direct-loop references (double) for 3-D convolutions and transposed
// convolutions, forward and the grads of sum(y * dy); a 2-D problem is the
// 3-D one with depth 1. Shared by tests/test_conv3d.cpp and tests/test_conv_transpose.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <random>
#include <vector>

namespace minidl::testing {

struct ConvProblem {
  int64_t batch = 1, in_channels = 1, out_channels = 1, groups = 1;
  std::array<int64_t, 3> in{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1}, padding{0, 0, 0}, dilation{1, 1, 1};
  std::array<int64_t, 3> output_padding{0, 0, 0};  // transposed only
  bool transposed = false;

  int64_t out(size_t i) const {
    return transposed ? (in[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (kernel[i] - 1) +
                            output_padding[i] + 1
                      : (in[i] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1) / stride[i] + 1;
  }
  int64_t in_volume() const { return in[0] * in[1] * in[2]; }
  int64_t out_volume() const { return out(0) * out(1) * out(2); }
  int64_t x_size() const { return batch * in_channels * in_volume(); }
  int64_t y_size() const { return batch * out_channels * out_volume(); }
  // conv: (out, in/groups, k...); transposed: (in, out/groups, k...)
  int64_t w_size() const { return in_channels * out_channels / groups * kernel[0] * kernel[1] * kernel[2]; }
};

struct ConvReference {
  std::vector<double> y, dx, dw, db;
};

// Calls f(x index, w index, y index) for every product of the problem.
// conv: y[n][k][o] += w[k][c][t] x[n][g*Cg + c][o*s - p + t*d]; transposed:
// y[n][g*Kg + k][i*s - p + t*d] += w[g*Cg + c][k][t] x[n][g*Cg + c][i].
template <class F>
void for_each_product(const ConvProblem& p, F f) {
  const int64_t Cg = p.in_channels / p.groups, Kg = p.out_channels / p.groups;
  const std::array<int64_t, 3> out{p.out(0), p.out(1), p.out(2)};
  // "small" side: the one whose index runs over positions (conv output / transposed input)
  const std::array<int64_t, 3> small = p.transposed ? p.in : out, big = p.transposed ? out : p.in;
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t gi = 0; gi < p.groups; ++gi)
      for (int64_t k = 0; k < Kg; ++k)
        for (int64_t c = 0; c < Cg; ++c)
          for (int64_t a = 0; a < small[0]; ++a)
            for (int64_t b = 0; b < small[1]; ++b)
              for (int64_t e = 0; e < small[2]; ++e)
                for (int64_t t0 = 0; t0 < p.kernel[0]; ++t0)
                  for (int64_t t1 = 0; t1 < p.kernel[1]; ++t1)
                    for (int64_t t2 = 0; t2 < p.kernel[2]; ++t2) {
                      const int64_t u = a * p.stride[0] - p.padding[0] + t0 * p.dilation[0];
                      const int64_t v = b * p.stride[1] - p.padding[1] + t1 * p.dilation[1];
                      const int64_t z = e * p.stride[2] - p.padding[2] + t2 * p.dilation[2];
                      if (u < 0 || u >= big[0] || v < 0 || v >= big[1] || z < 0 || z >= big[2]) continue;
                      const int64_t small_pos = (a * small[1] + b) * small[2] + e, big_pos = (u * big[1] + v) * big[2] + z;
                      const int64_t tap = (t0 * p.kernel[1] + t1) * p.kernel[2] + t2;
                      const int64_t ci = gi * Cg + c, co = gi * Kg + k;
                      const int64_t taps = p.kernel[0] * p.kernel[1] * p.kernel[2];
                      const int64_t xi = (n * p.in_channels + ci) * p.in_volume() + (p.transposed ? small_pos : big_pos);
                      const int64_t yi = (n * p.out_channels + co) * p.out_volume() + (p.transposed ? big_pos : small_pos);
                      const int64_t wi = p.transposed ? (ci * Kg + k) * taps + tap : (co * Cg + c) * taps + tap;
                      f(static_cast<size_t>(xi), static_cast<size_t>(wi), static_cast<size_t>(yi));
                    }
}

inline ConvReference conv_reference(const ConvProblem& p, const std::vector<double>& x, const std::vector<double>& w,
                                    const std::vector<double>& b, const std::vector<double>& dy) {
  ConvReference r;
  r.y.assign(static_cast<size_t>(p.y_size()), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  r.db.assign(static_cast<size_t>(p.out_channels), 0.0);
  const int64_t vol = p.out_volume();
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t k = 0; k < p.out_channels; ++k)
      for (int64_t q = 0; q < vol; ++q) {
        const auto yi = static_cast<size_t>((n * p.out_channels + k) * vol + q);
        if (!b.empty()) r.y[yi] = b[static_cast<size_t>(k)];
        r.db[static_cast<size_t>(k)] += dy[yi];
      }
  for_each_product(p, [&](size_t xi, size_t wi, size_t yi) {
    r.y[yi] += w[wi] * x[xi];
    r.dx[xi] += w[wi] * dy[yi];
    r.dw[wi] += x[xi] * dy[yi];
  });
  return r;
}

inline std::vector<double> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist;
  std::vector<double> v(n);
  for (double& e : v) e = dist(gen);
  return v;
}

}  // namespace minidl::testing
