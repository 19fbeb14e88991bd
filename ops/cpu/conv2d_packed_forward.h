// The im2col path's packed weights and its forward on them
// (ops/cpu/conv2d_im2col.cpp), shared with the grad input by phases
// (ops/cpu/conv2d_im2col_input.cpp), which runs the forward on taps of
// w's transposed packing, in its own order. Internal to ops/cpu/.
#pragma once

#include <cstdint>

#include "minidl/ops/conv2d.h"  // Conv2dGeometry

namespace minidl::conv2d_im2col {

// Which matrix of w the left operand is, per tap t: W_t (rows m, K = c) for
// the forward; W_t^T (rows c, K = m) for grad input (forwards of dy).
enum class WeightView { kForward, kTransposed };

// w packed tap-major as the left operand, in K blocks of kKC, group after
// group (`group` values apart). Block (tap, k0) of size kc starts at
// (tap * inner + k0) * m_pad, row tile i of it at + i * kc * kMR, where
// m_pad is the rows rounded up to kMR and inner the K extent.
template <class T>
struct PackedWeights {
  const T* data;
  int64_t group;  // values per group
  // The packed tap of each of the forward's taps (nullptr: the same one):
  // a phase of a strided grad input uses some of the taps, in its own order.
  const int64_t* taps = nullptr;

  const T* block(int64_t gi, int64_t t, int64_t inner, int64_t k0, int64_t m_pad) const {
    return data + gi * group + ((taps ? taps[t] : t) * inner + k0) * m_pad;
  }
};

// Packs w (g is w's own geometry) into the calling thread's Slot::kWeights.
template <class T>
PackedWeights<T> pack_weights(const Conv2dGeometry& g, const T* w, WeightView view);

// The forward correlation of x with packed weights (WeightView::kForward of
// g's weights, or a view that reads as them): y (N, K, out_h, out_w), where
// out_h and out_w may exceed PyTorch's formula (the extra outputs read padding).
template <class T>
void forward_packed(const Conv2dGeometry& g, const T* x, const PackedWeights<T>& packed_w, const T* bias, T* y);

}  // namespace minidl::conv2d_im2col
