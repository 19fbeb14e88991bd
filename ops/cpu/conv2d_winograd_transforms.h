// The transforms of Winograd's minimal filtering F(m x m, 3x3) (Lavin and
// Gray, "Fast Algorithms for Convolutional Neural Networks", 2015) for the
// two tile sizes of ops/cpu/conv2d_winograd.cpp: m = 2 (F2, 4x4 patches, 16
// positions) and m = 4 (F4, 6x6 patches, 36 positions). For one 3x3 kernel g
// and one (m+2)x(m+2) input patch d,
//     y (m x m) = A^T [ (G g G^T) . (B^T d B) ] A        (. elementwise)
// Each struct gives the 1-D maps (applied to rows, then columns) and the 2-D
// transforms over T: a scalar, or a SIMD vector holding one patch per lane.
// Internal to ops/cpu/.
#pragma once

#include <cstdint>
#include <type_traits>

namespace minidl::winograd {

// The scalar type of T (T itself, or a SIMD vector's lanes): constants
// multiply vectors as scalars of their lane type.
template <class T>
auto lane_value() {
  if constexpr (std::is_arithmetic_v<T>)
    return T{};
  else
    return T{}[0];
}
template <class T>
using Scalar = decltype(lane_value<T>());

// u[xi * R + r] = (G g_r G^T)_xi for R kernels at once, g_r(a, b) = g(r, a, b)
// for r < rows (0 past them), from the n x 3 matrix G: the U values of a row
// tile of the GEMMs' left operand, R consecutive floats per position xi.
// Computed in double and rounded once: G's entries for F4 (thirds,
// fifteenths) are not exact in binary, and the weights are transformed once
// per call, so the extra precision is nearly free. R kernels side by side
// so that the loops over r vectorize: one kernel at a time (scalar double)
// took half of a 64 x 512 -> 512 forward on 4x4 maps.
template <int n, int R, class T, class Kernel>
void kernel_transform_double(const double (&G)[n][3], Kernel g, int64_t rows, T* u) {
  double k[9][R];
  for (int ab = 0; ab < 9; ++ab)
    for (int r = 0; r < R; ++r) k[ab][r] = r < rows ? static_cast<double>(g(r, ab / 3, ab % 3)) : 0.0;
  double t[n][3][R];  // G g
  for (int i = 0; i < n; ++i)
    for (int b = 0; b < 3; ++b)
      for (int r = 0; r < R; ++r) t[i][b][r] = G[i][0] * k[b][r] + G[i][1] * k[3 + b][r] + G[i][2] * k[6 + b][r];
  for (int i = 0; i < n; ++i)
    for (int s = 0; s < n; ++s)
      for (int r = 0; r < R; ++r)
        u[(i * n + s) * R + r] = static_cast<T>(t[i][0][r] * G[s][0] + t[i][1][r] * G[s][1] + t[i][2][r] * G[s][2]);
}

// F(2x2, 3x3): interpolation points 0, 1, -1, infinity. Every entry of B and
// A is 0 or +-1, so the input and output transforms are exact up to
// rounding of their sums.
struct F2 {
  static constexpr int kTile = 2, kPatch = 4, kPositions = 16;
  static constexpr double kG[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};

  // B^T d for 4 values: B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
  template <class T>
  static void input_1d(const T* d, int64_t ds, T* o, int64_t step) {
    const T d0 = d[0], d1 = d[ds], d2 = d[2 * ds], d3 = d[3 * ds];
    o[0] = d0 - d2, o[step] = d1 + d2, o[2 * step] = d2 - d1, o[3 * step] = d1 - d3;
  }
  // A^T m for 4 values: A^T = [1 1 1 0; 0 1 -1 -1].
  template <class T>
  static void output_1d(const T* m, int64_t ms, T* o, int64_t step) {
    const T m0 = m[0], m1 = m[ms], m2 = m[2 * ms], m3 = m[3 * ms];
    o[0] = m0 + m1 + m2, o[step] = m1 - m2 - m3;
  }

  // For the weight gradient (F2 only): G^T u G for u (4x4), the 3x3 kernel
  // gradient from the gradient of U = G g G^T.
  template <class T>
  static void kernel_grad_transform(const T* u, T* g) {
    auto gt_1d = [](T u0, T u1, T u2, T u3, T* o, int64_t step) {  // G^T = [1 1/2 1/2 0; 0 1/2 -1/2 0; 0 1/2 1/2 1]
      using E = Scalar<T>;
      const T h = E(0.5) * (u1 + u2);
      o[0] = u0 + h, o[step] = E(0.5) * (u1 - u2), o[2 * step] = h + u3;
    };
    T t[12];  // G^T u: 3 rows of 4
    for (int s = 0; s < 4; ++s) gt_1d(u[s], u[4 + s], u[8 + s], u[12 + s], t + s, 4);
    for (int r = 0; r < 3; ++r) gt_1d(t[r * 4], t[r * 4 + 1], t[r * 4 + 2], t[r * 4 + 3], g + r * 3, 1);
  }
  // A d for 2 values of dy: A = [1 0; 1 1; 1 -1; 0 -1].
  template <class T>
  static void output_grad_1d(const T* d, int64_t ds, T* o, int64_t step) {
    const T d0 = d[0], d1 = d[ds];
    o[0] = d0, o[step] = d0 + d1, o[2 * step] = d0 - d1, o[3 * step] = -d1;
  }
};

// F(4x4, 3x3): interpolation points 0, 1, -1, 1/2, -2, infinity. Of the
// sets whose B and A have only dyadic entries (exact in binary), this one
// gave the smallest float32 error in a simulation of the whole conv (C = 64
// and 256 channels, 3x3 kernels of PyTorch's default init, unit normal
// inputs; error against float64, relative to the RMS output):
//     points            RMS error   max error
//     0, +-1, +-2        1.7e-6      2.9e-5     (Lavin and Gray's)
//     0, +-1, +-1/2      1.7e-6      3.4e-5
//     0, +-1, 1/2, -2    1.1e-6      1.2e-5     (chosen; as Barabasz et al. 2020 find)
//     0, +-1, -1/2, 2    1.1e-6      1.3e-5
//     0, +-1, 1/2, 2     2.9e-6      3.3e-5
// (C = 64; C = 256 ranks them the same.) The measured bound of the real
// kernels is in tests/test_conv2d_winograd.cpp.
struct F4 {
  static constexpr int kTile = 4, kPatch = 6, kPositions = 36;
  static constexpr double kG[6][3] = {{1, 0, 0},
                                      {1.0 / 3, 1.0 / 3, 1.0 / 3},
                                      {-1.0 / 3, 1.0 / 3, -1.0 / 3},
                                      {-16.0 / 15, -8.0 / 15, -4.0 / 15},
                                      {1.0 / 15, -2.0 / 15, 4.0 / 15},
                                      {0, 0, 1}};

  // B^T d for 6 values:
  //   B^T = [1 -3/2   -2  3/2   1 0;  0   -1  1/2  5/2 1 0;  0 1 -5/2 1/2 1 0;
  //          0   -2   -1    2   1 0;  0  1/2   -1 -1/2 1 0;  0 1 -3/2  -2 3/2 1]
  template <class T>
  static void input_1d(const T* d, int64_t ds, T* o, int64_t step) {
    const T d0 = d[0], d1 = d[ds], d2 = d[2 * ds], d3 = d[3 * ds], d4 = d[4 * ds], d5 = d[5 * ds];
    using E = Scalar<T>;
    const E h = 0.5;
    o[0] = (d0 + d4) + E(1.5) * (d3 - d1) - E(2) * d2;
    o[step] = (d4 - d1) + h * d2 + E(2.5) * d3;
    o[2 * step] = (d4 + d1) - E(2.5) * d2 + h * d3;
    o[3 * step] = (d4 - d2) + E(2) * (d3 - d1);
    o[4 * step] = (d4 - d2) + h * (d1 - d3);
    o[5 * step] = (d5 + d1) + E(1.5) * (d4 - d2) - E(2) * d3;
  }
  // A^T m for 6 values: A^T = [1 1 1 1 1 0; 0 1 -1 1/2 -2 0; 0 1 1 1/4 4 0; 0 1 -1 1/8 -8 1].
  template <class T>
  static void output_1d(const T* m, int64_t ms, T* o, int64_t step) {
    const T m0 = m[0], m1 = m[ms], m2 = m[2 * ms], m3 = m[3 * ms], m4 = m[4 * ms], m5 = m[5 * ms];
    using E = Scalar<T>;
    const T p = m1 + m2, q = m1 - m2;
    o[0] = m0 + p + (m3 + m4);
    o[step] = q + E(0.5) * m3 - E(2) * m4;
    o[2 * step] = p + E(0.25) * m3 + E(4) * m4;
    o[3 * step] = (q + m5) + E(0.125) * m3 - E(8) * m4;
  }
  // A d for 4 values of dy: A = [1 0 0 0; 1 1 1 1; 1 -1 1 -1; 1 1/2 1/4 1/8; 1 -2 4 -8; 0 0 0 1].
  template <class T>
  static void output_grad_1d(const T* d, int64_t ds, T* o, int64_t step) {
    using E = Scalar<T>;
    const T d0 = d[0], d1 = d[ds], d2 = d[2 * ds], d3 = d[3 * ds];
    const T e = d0 + d2, f = d1 + d3;
    o[0] = d0, o[step] = e + f, o[2 * step] = e - f;
    o[3 * step] = (d0 + E(0.5) * d1) + (E(0.25) * d2 + E(0.125) * d3);
    o[4 * step] = (d0 - E(2) * d1) + (E(4) * d2 - E(8) * d3);
    o[5 * step] = d3;
  }
  // G^T u G for u (6x6): the 3x3 kernel gradient from the gradient of U = G g G^T.
  template <class T>
  static void kernel_grad_transform(const T* u, T* g) {
    auto gt_1d = [](const T* v, int64_t vs, T* o, int64_t step) {  // G^T: the transpose of kG
      using E = Scalar<T>;
      const T u0 = v[0], u1 = v[vs], u2 = v[2 * vs], u3 = v[3 * vs], u4 = v[4 * vs], u5 = v[5 * vs];
      const T p = E(1.0 / 3) * (u1 + u2), q = E(1.0 / 3) * (u1 - u2);
      o[0] = (u0 + q) + (E(-16.0 / 15) * u3 + E(1.0 / 15) * u4);
      o[step] = p + (E(-8.0 / 15) * u3 + E(-2.0 / 15) * u4);
      o[2 * step] = (q + u5) + (E(-4.0 / 15) * u3 + E(4.0 / 15) * u4);
    };
    T t[18];  // G^T u: 3 rows of 6
    for (int s = 0; s < 6; ++s) gt_1d(u + s, 6, t + s, 6);
    for (int r = 0; r < 3; ++r) gt_1d(t + r * 6, 1, g + r * 3, 1);
  }
};

// v (n x n) = B^T d B for an n x n patch d (row-major).
template <class F, class T>
inline void input_transform(const T* d, T* v) {
  constexpr int n = F::kPatch;
  T t[n * n];  // B^T d
  for (int s = 0; s < n; ++s) F::input_1d(d + s, n, t + s, n);
  for (int r = 0; r < n; ++r) F::input_1d(t + r * n, 1, v + r * n, 1);
}

// o (m x m, row-major) = A^T mm A for mm (n x n).
template <class F, class T>
inline void output_transform(const T* mm, T* o) {
  constexpr int n = F::kPatch, m = F::kTile;
  T t[m * n];  // A^T mm: m rows of n
  for (int s = 0; s < n; ++s) F::output_1d(mm + s, n, t + s, n);
  for (int r = 0; r < m; ++r) F::output_1d(t + r * n, 1, o + r * m, 1);
}

// m (n x n) = A d A^T for an m x m block d of dy (row-major): the gradient
// of the n x n matrix before A^T . A.
template <class F, class T>
inline void output_grad_transform(const T* d, T* mm) {
  constexpr int n = F::kPatch, m = F::kTile;
  T t[n * m];  // A d: n rows of m
  for (int s = 0; s < m; ++s) F::output_grad_1d(d + s, m, t + s, m);
  for (int r = 0; r < n; ++r) F::output_grad_1d(t + r * m, 1, mm + r * n, 1);
}

// u[xi * R + r] = G g_r G^T for R kernels g(r, a, b), r < rows.
template <class F, int R, class T, class Kernel>
inline void kernel_transform(Kernel g, int64_t rows, T* u) {
  kernel_transform_double<F::kPatch, R>(F::kG, g, rows, u);
}

}  // namespace minidl::winograd
