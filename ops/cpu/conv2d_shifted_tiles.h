// The register-blocked micro-kernels of conv2d's shifted-plane path
// (ops/cpu/conv2d_shifted.cpp): a forward tile (output channels by vectors of
// output pixels, read straight from shifted input planes) and a weight-grad
// tile ((input channel, tap) pairs by vectors of output channels).
#pragma once

#include <algorithm>
#include <cstdint>

#include "minidl/core/check.h"
#include "minidl/ops/cpu/conv2d_simd.h"

namespace minidl::conv2d_shifted {

using conv2d_simd::kAccRegs;
using conv2d_simd::kLanes;
using conv2d_simd::broadcast;
using conv2d_simd::in_register;
using conv2d_simd::load;
using conv2d_simd::store;
using conv2d_simd::Vec;

// Shapes of the micro-tiles: forward tiles are kRows output channels by
// kQVecs vectors of output pixels; weight-grad tiles are n (input channel,
// tap) pairs by 1, 2 or 4 vectors of output channels.
constexpr int kRows = kAccRegs / 3;
constexpr int kQVecs = 3;

// out[r][q] = sum_{j<J} sum_{t<taps} w[(j*taps + t)*R + r] * in[j*plane + off[t] + q]
// for r < R and q < NV vector widths. Overwrites out (row pitch ldo).
template <class T, int R, int NV>
void shifted_tile(const T* w, const T* in, int64_t plane, const int64_t* off, int64_t taps, int64_t J, T* out,
                  int64_t ldo) {
  using V = Vec<T>;
  constexpr int64_t L = kLanes<T>;
  V acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = V{};
  for (int64_t j = 0; j < J; ++j) {
    const T* in_j = in + j * plane;
    for (int64_t t = 0; t < taps; ++t, w += R) {
      const T* src = in_j + off[t];
      V x[NV];
      for (int v = 0; v < NV; ++v) {
        x[v] = load(src + v * L);
        in_register(x[v]);
      }
      for (int r = 0; r < R; ++r) {
        const V wr = broadcast(w[r]);
        for (int v = 0; v < NV; ++v) acc[r][v] += wr * x[v];
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) store(out + r * ldo + v * L, acc[r][v]);
}

template <class T, int R>
void shifted_tile_nv(int64_t nv, const T* w, const T* in, int64_t plane, const int64_t* off, int64_t taps,
                     int64_t J, T* out, int64_t ldo) {
  static_assert(kQVecs == 3);
  if (nv == 3) shifted_tile<T, R, 3>(w, in, plane, off, taps, J, out, ldo);
  if (nv == 2) shifted_tile<T, R, 2>(w, in, plane, off, taps, J, out, ldo);
  if (nv == 1) shifted_tile<T, R, 1>(w, in, plane, off, taps, J, out, ldo);
}

template <class T>
void shifted_tile_any(int64_t rows, int64_t nv, const T* w, const T* in, int64_t plane, const int64_t* off,
                      int64_t taps, int64_t J, T* out, int64_t ldo) {
  if (rows == kRows) return shifted_tile_nv<T, kRows>(nv, w, in, plane, off, taps, J, out, ldo);
  if (rows == 4) return shifted_tile_nv<T, 4>(nv, w, in, plane, off, taps, J, out, ldo);
  if (rows == 2) return shifted_tile_nv<T, 2>(nv, w, in, plane, off, taps, J, out, ldo);
  if (rows == 1) return shifted_tile_nv<T, 1>(nv, w, in, plane, off, taps, J, out, ldo);
  MINIDL_ASSERT(false, "conv2d: bad tile height ", rows);
}

// dwt[c][m] += sum_{q0<=q<q1} src[c][q] * dyt[q*ld_dyt + m]  for c < NC, m < NV vector widths.
template <class T, int NC, int NV>
void weight_grad_tile(const T* const* src, const T* dyt, int64_t ld_dyt, int64_t q0, int64_t q1, T* dwt,
                      int64_t ld_dwt) {
  using V = Vec<T>;
  constexpr int64_t L = kLanes<T>;
  V acc[NC][NV];
  for (int c = 0; c < NC; ++c)
    for (int v = 0; v < NV; ++v) acc[c][v] = V{};
  for (int64_t q = q0; q < q1; ++q) {
    V d[NV];
    // Not pinned by in_register, unlike the other tiles: here it made
    // UNet3d's conv3d forward+backward 10% slower on a Zen 3 (AVX2).
    for (int v = 0; v < NV; ++v) d[v] = load(dyt + q * ld_dyt + v * L);
    for (int c = 0; c < NC; ++c) {
      const V s = broadcast(src[c][q]);
      for (int v = 0; v < NV; ++v) acc[c][v] += s * d[v];
    }
  }
  for (int c = 0; c < NC; ++c)
    for (int v = 0; v < NV; ++v) {
      T* p = dwt + c * ld_dwt + v * L;
      store(p, load(p) + acc[c][v]);
    }
}

// Weight-grad tile widths: NV vectors of output channels by kAccRegs/NV
// (capped at 12, the source pointers must fit in registers) (channel, tap) pairs.
constexpr int grad_cols(int nv) { return std::min(12, kAccRegs / nv); }
constexpr int kMaxGradCols = grad_cols(1);

template <class T>
void weight_grad_tile_any(int64_t nv, const T* const* src, const T* dyt, int64_t ld_dyt, int64_t q0, int64_t q1,
                          T* dwt, int64_t ld_dwt) {
  if (nv == 4) return weight_grad_tile<T, grad_cols(4), 4>(src, dyt, ld_dyt, q0, q1, dwt, ld_dwt);
  if (nv == 2) return weight_grad_tile<T, grad_cols(2), 2>(src, dyt, ld_dyt, q0, q1, dwt, ld_dwt);
  if (nv == 1) return weight_grad_tile<T, grad_cols(1), 1>(src, dyt, ld_dyt, q0, q1, dwt, ld_dwt);
  MINIDL_ASSERT(false, "conv2d: bad weight-grad tile width ", nv);
}

}  // namespace minidl::conv2d_shifted
