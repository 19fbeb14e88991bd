// The coordinate math of the CUDA upsample kernels (ops/cuda/upsample.cu),
// shared with the CPU tests: each output coordinate's source taps and linear
// weights with PyTorch's formulas (as ops/cpu/interpolate.cpp: float for the
// nearest modes, the tensor's type for linear), and their inverse per input
// index for the atomic-free backward. Plain C++ with MINIDL_HOST_DEVICE.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE

namespace minidl::cuda_math {

// 0 nearest, 1 nearest-exact, 2 linear (ops/interpolate.h's UpsampleMode).
struct UpsampleDim {
  int64_t in = 1, out = 1;
  double scale = 0;  // the user's scale_factor, or 0: in / out
  int mode = 0;
  bool align_corners = false;
};

// Output coordinate -> x[i0] l0 + x[i1] l1 (nearest: l0 = 1, l1 = 0, i1 = i0).
template <class T>
struct UpsampleTap {
  int64_t i0, i1;
  T l0, l1;
};

template <class S>
MINIDL_HOST_DEVICE inline S upsample_source_scale(double scale, int64_t in, int64_t out) {
  return scale > 0 ? static_cast<S>(1.0 / scale) : static_cast<S>(in) / static_cast<S>(out);
}

template <class T>
MINIDL_HOST_DEVICE inline UpsampleTap<T> upsample_tap(const UpsampleDim& d, int64_t o) {
  const int64_t in = d.in, out = d.out;
  if (d.mode != 2) {  // PyTorch's nearest_idx / nearest_exact_idx
    int64_t src;
    if (d.mode == 0 && out == in) {
      src = o;
    } else if (d.mode == 0 && out == 2 * in) {
      src = o >> 1;
    } else {
      const float scale = upsample_source_scale<float>(d.scale, in, out);
      const float at = d.mode == 0 ? static_cast<float>(o) * scale : (static_cast<float>(o) + 0.5f) * scale;
      const int64_t f = static_cast<int64_t>(std::floor(at));
      src = f < in - 1 ? f : in - 1;
    }
    return UpsampleTap<T>{src, src, T(1), T(0)};
  }
  if (out == in) return UpsampleTap<T>{o, o, T(1), T(0)};  // PyTorch copies
  const T scale = d.align_corners ? (out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0))
                                  : upsample_source_scale<T>(d.scale, in, out);
  T src = d.align_corners ? scale * static_cast<T>(o) : scale * (static_cast<T>(o) + T(0.5)) - T(0.5);
  if (!d.align_corners && src < 0) src = 0;
  UpsampleTap<T> t;
  const int64_t f = static_cast<int64_t>(std::floor(src));
  t.i0 = f < in - 1 ? f : in - 1;
  T l1 = src - static_cast<T>(t.i0);
  l1 = l1 < T(0) ? T(0) : (l1 > T(1) ? T(1) : l1);
  t.l1 = l1;
  t.i1 = t.i0 + (t.i0 < in - 1 ? 1 : 0);
  t.l0 = T(1) - t.l1;
  return t;
}

// Who reads input index j along one dim: (output, weight) pairs, in
// increasing output order, the l0 tap before the l1 tap (CSR over j).
template <class T>
struct UpsampleReader {
  int64_t o;
  T w;
};

template <class T>
void upsample_readers(const UpsampleDim& d, std::vector<int64_t>& start, std::vector<UpsampleReader<T>>& readers) {
  std::vector<std::vector<UpsampleReader<T>>> per(static_cast<size_t>(d.in));
  for (int64_t o = 0; o < d.out; ++o) {
    const UpsampleTap<T> t = upsample_tap<T>(d, o);
    per[static_cast<size_t>(t.i0)].push_back({o, t.l0});
    if (t.l1 != T(0)) per[static_cast<size_t>(t.i1)].push_back({o, t.l1});
  }
  start.assign(1, 0);
  readers.clear();
  for (const auto& list : per) {
    readers.insert(readers.end(), list.begin(), list.end());
    start.push_back(static_cast<int64_t>(readers.size()));
  }
}

}  // namespace minidl::cuda_math
