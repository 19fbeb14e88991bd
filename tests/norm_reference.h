// The double-loop reference for the normalization ops (batch_norm,
// instance_norm, group_norm, layer_norm): statistics per group, affine per
// channel, forward and backward in double, built with plain index arithmetic
// and independent of the ops' kernels. Shared by tests/test_norm_ops.cpp and
// tests/test_norm_ops_running_stats.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "minidl/minidl.h"
#include "tests/test_util.h"

namespace minidl::testing {

// ---- the reference: every norm is "statistics per group, affine per channel" ----
// group[i] and channel[i] name the statistic and the affine parameter of flat
// element i; they are built below from (n, c, s) with plain index arithmetic.
struct Layout {
  std::vector<int64_t> group, channel;
  int64_t groups = 0, channels = 0;
};

struct NCS {
  int64_t N, C, S;
};
inline NCS ncs(const Shape& shape) {
  int64_t S = 1;
  for (size_t d = 2; d < shape.size(); ++d) S *= shape[d];
  return {shape[0], shape[1], S};
}

inline Layout bn_layout(const Shape& shape) {
  const auto [N, C, S] = ncs(shape);
  Layout l{{}, {}, C, C};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) l.group.push_back(c), l.channel.push_back(c);
  return l;
}

inline Layout in_layout(const Shape& shape) {
  const auto [N, C, S] = ncs(shape);
  Layout l{{}, {}, N * C, C};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) l.group.push_back(n * C + c), l.channel.push_back(c);
  return l;
}

inline Layout gn_layout(const Shape& shape, int64_t G) {
  const auto [N, C, S] = ncs(shape);
  Layout l{{}, {}, N * G, C};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) l.group.push_back(n * G + c / (C / G)), l.channel.push_back(c);
  return l;
}

inline Layout ln_layout(const Shape& shape, size_t trailing) {
  int64_t D = 1, total = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    total *= shape[d];
    if (d >= shape.size() - trailing) D *= shape[d];
  }
  Layout l{{}, {}, total / D, D};
  for (int64_t i = 0; i < total; ++i) l.group.push_back(i / D), l.channel.push_back(i % D);
  return l;
}

struct RefStats {
  std::vector<double> mean, var, count;  // biased var
};

inline RefStats ref_stats(const std::vector<double>& x, const Layout& l) {
  RefStats r{std::vector<double>(l.groups, 0.0), std::vector<double>(l.groups, 0.0),
             std::vector<double>(l.groups, 0.0)};
  for (size_t i = 0; i < x.size(); ++i) r.mean[l.group[i]] += x[i], r.count[l.group[i]] += 1;
  for (int64_t g = 0; g < l.groups; ++g) r.mean[g] /= r.count[g];
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = x[i] - r.mean[l.group[i]];
    r.var[l.group[i]] += d * d;
  }
  for (int64_t g = 0; g < l.groups; ++g) r.var[g] /= r.count[g];
  return r;
}

inline double at(const std::vector<double>& v, int64_t i, double fallback) { return v.empty() ? fallback : v[i]; }

// y = (x - mean_g) / sqrt(var_g + eps) * w_c + b_c with the given statistics.
inline std::vector<double> ref_forward(const std::vector<double>& x, const Layout& l, const RefStats& st,
                                const std::vector<double>& w, const std::vector<double>& b, double eps) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t g = l.group[i], c = l.channel[i];
    y[i] = (x[i] - st.mean[g]) / std::sqrt(st.var[g] + eps) * at(w, c, 1.0) + at(b, c, 0.0);
  }
  return y;
}

struct RefGrads {
  std::vector<double> dx, dw, db;
};

// Backward of ref_forward. batch_stats: the statistics came from x itself.
inline RefGrads ref_backward(const std::vector<double>& x, const std::vector<double>& dy, const Layout& l,
                      const RefStats& st, const std::vector<double>& w, double eps, bool batch_stats) {
  RefGrads r{std::vector<double>(x.size()), std::vector<double>(l.channels, 0.0),
             std::vector<double>(l.channels, 0.0)};
  std::vector<double> mean_g(l.groups, 0.0), mean_gx(l.groups, 0.0);
  auto xhat = [&](size_t i) { return (x[i] - st.mean[l.group[i]]) / std::sqrt(st.var[l.group[i]] + eps); };
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t g = l.group[i], c = l.channel[i];
    const double gi = dy[i] * at(w, c, 1.0);
    mean_g[g] += gi / st.count[g];
    mean_gx[g] += gi * xhat(i) / st.count[g];
    r.dw[c] += dy[i] * xhat(i);
    r.db[c] += dy[i];
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t g = l.group[i], c = l.channel[i];
    const double gi = dy[i] * at(w, c, 1.0), invstd = 1.0 / std::sqrt(st.var[g] + eps);
    r.dx[i] = batch_stats ? invstd * (gi - mean_g[g] - xhat(i) * mean_gx[g]) : invstd * gi;
  }
  return r;
}

// A tensor's elements in double; empty for an undefined tensor (no weight or bias).
inline std::vector<double> values(const Tensor& t) {
  return t.defined() ? t.to_vector<double>() : std::vector<double>{};
}

// Reference values `a` against the tensor `b` (allclose with b's shape).
inline bool close(const std::vector<double>& a, const Tensor& b, double rtol, double atol) {
  return allclose(b, tensor(a, b.shape(), kFloat64), rtol, atol);
}

// Mean and sum of squared deviations of v[b, e) by the two-pass formula: the
// reference the CUDA kernels' Welford merges are checked against.
struct TwoPass {
  double mean, m2;
};

inline TwoPass two_pass(const std::vector<double>& v, size_t b, size_t e) {
  double s = 0;
  for (size_t i = b; i < e; ++i) s += v[i];
  const double mean = s / static_cast<double>(e - b);
  double m2 = 0;
  for (size_t i = b; i < e; ++i) m2 += (v[i] - mean) * (v[i] - mean);
  return {mean, m2};
}

}  // namespace minidl::testing
