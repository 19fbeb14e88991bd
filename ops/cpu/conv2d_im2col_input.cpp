// conv2d's grad input on the im2col path (ops/cpu/conv2d_im2col.cpp) as
// forwards of dy, one per phase of dx.
//
// Input pixel ih is reached by the taps a with ih = oh*s - pad + a*d (stride
// s, dilation d), and which taps those are depends only on ih mod s, its
// phase: dx at ih = s*i + r is the sum over the phase's taps of W_a^T dy at
// oh = i + (r + pad - a*d)/s. Ordered by that offset (a descending), the
// offsets step by d / gcd(s, d): a stride-1 correlation of dy with the
// phase's sub-kernel (W^T's taps, reversed), padded by minus the first
// offset (a negative padding where that offset is positive: the forward's
// plans take it as they take any other). So grad input is s_h * s_w
// forwards, each summing its taps in registers, and every dx pixel is
// written once; with stride 1 it is one forward, of the whole kernel
// flipped, straight into dx. Tap by tap (GEMM, then col2im, as this path
// did before), each tap's product went through memory and was added into dx
// by a scatter: a fifth of a 3x3 stride-2 grad input on 16x16 maps. conv3d
// splits its strided depth into phases the same way (ops/cpu/conv3d.cpp).
#include <omp.h>

#include <algorithm>
#include <vector>

#include "minidl/ops/cpu/conv2d_gemm.h"
#include "minidl/ops/cpu/conv2d_kernels.h"
#include "minidl/ops/cpu/conv2d_packed_forward.h"

namespace minidl {

namespace {

// The phase r of one axis: the kernel offsets that reach it, in the
// sub-kernel's order, the sub-correlation's padding and dilation, and how
// many input positions have this phase.
struct AxisPhase {
  std::vector<int64_t> taps;
  int64_t pad = 0, dilation = 1, size = 0;
};

AxisPhase axis_phase(int64_t r, int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  AxisPhase p;
  p.size = r < in ? (in - 1 - r) / stride + 1 : 0;
  auto offset = [&](int64_t a) { return (r + pad - a * dilation) / stride; };  // exact for the phase's taps
  for (int64_t a = kernel - 1; a >= 0; --a)
    if (((r + pad - a * dilation) % stride + stride) % stride == 0) p.taps.push_back(a);
  if (p.taps.empty()) return p;
  p.pad = -offset(p.taps[0]);
  p.dilation = p.taps.size() > 1 ? offset(p.taps[1]) - offset(p.taps[0]) : 1;
  return p;
}

}  // namespace

template <class T>
void conv2d_im2col_backward_input(const Conv2dGeometry& g, const T* dy, const T* w, T* dx) {
  std::vector<AxisPhase> rows, cols;
  for (int64_t r = 0; r < g.stride_h; ++r)
    rows.push_back(axis_phase(r, g.in_h, g.kernel_h, g.stride_h, g.pad_h, g.dilation_h));
  for (int64_t r = 0; r < g.stride_w; ++r)
    cols.push_back(axis_phase(r, g.in_w, g.kernel_w, g.stride_w, g.pad_w, g.dilation_w));
  const bool one_phase = g.stride_h == 1 && g.stride_w == 1;
  const int64_t HW = g.in_h * g.in_w, planes = g.batch * g.in_channels;
  // W^T packed once, all taps (WeightView::kTransposed): per tap, the
  // forward weight of a stride-1 correlation of dy into dx; a phase's
  // forward reads the blocks of its taps.
  const conv2d_im2col::PackedWeights<T> packed =
      conv2d_im2col::pack_weights(g, w, conv2d_im2col::WeightView::kTransposed);
  // Each phase's pixels of dx, [n][c][i][j], phase after phase (row phase
  // major): they partition dx, so all of them are dx's size (with one phase,
  // dx itself). nullptr: no tap reaches the phase (its pixels are 0).
  T* by_phase = one_phase ? dx : conv2d_gemm::thread_buffer<T>(conv2d_gemm::Slot::kSums, planes * HW);
  std::vector<const T*> values;
  std::vector<int64_t> taps;
  for (const AxisPhase& ph : rows)
    for (const AxisPhase& pw : cols) {
      values.push_back(nullptr);
      if (ph.taps.empty() || pw.taps.empty() || ph.size * pw.size == 0) continue;
      taps.clear();
      for (int64_t a : ph.taps)
        for (int64_t b : pw.taps) taps.push_back(a * g.kernel_w + b);
      Conv2dGeometry s = g;
      s.in_channels = g.out_channels, s.in_h = g.out_h, s.in_w = g.out_w;
      s.out_channels = g.in_channels, s.out_h = ph.size, s.out_w = pw.size;
      s.kernel_h = static_cast<int64_t>(ph.taps.size()), s.kernel_w = static_cast<int64_t>(pw.taps.size());
      s.stride_h = 1, s.stride_w = 1, s.pad_h = ph.pad, s.pad_w = pw.pad;
      s.dilation_h = ph.dilation, s.dilation_w = pw.dilation;
      conv2d_im2col::PackedWeights<T> view = packed;
      view.taps = taps.data();
      conv2d_im2col::forward_packed(s, dy, view, static_cast<const T*>(nullptr), by_phase);
      values.back() = by_phase;
      by_phase += planes * ph.size * pw.size;
    }
  if (one_phase) return;  // (every tap reaches it)
  // Interleave the phases into dx, plane by plane: row by row, the column
  // phases' rows side by side (stride 2: pairs, which the compiler turns
  // into vector shuffles).
  int64_t widest = 0;
  for (const AxisPhase& pw : cols) widest = std::max(widest, pw.size);
  const std::vector<T> zeros(static_cast<size_t>(widest), T(0));
#pragma omp parallel for schedule(static) num_threads(conv2d_threads(g))
  for (int64_t plane = 0; plane < planes; ++plane)
    for (int64_t rh = 0; rh < g.stride_h; ++rh) {
      const int64_t ih = rows[static_cast<size_t>(rh)].size;
      for (int64_t i = 0; i < ih; ++i) {
        T* row = dx + plane * HW + (rh + i * g.stride_h) * g.in_w;
        // Row i of column phase rw.
        auto src = [&](int64_t rw) {
          const T* v = values[static_cast<size_t>(rh * g.stride_w + rw)];
          const int64_t iw = cols[static_cast<size_t>(rw)].size;
          return v ? v + (plane * ih + i) * iw : zeros.data();
        };
        if (g.stride_w == 2) {
          const T *even = src(0), *odd = src(1);
          const int64_t pairs = cols[1].size;
          for (int64_t j = 0; j < pairs; ++j) {
            row[2 * j] = even[j];
            row[2 * j + 1] = odd[j];
          }
          if (cols[0].size > pairs) row[2 * pairs] = even[pairs];
          continue;
        }
        for (int64_t rw = 0; rw < g.stride_w; ++rw) {
          const T* v = src(rw);
          for (int64_t j = 0; j < cols[static_cast<size_t>(rw)].size; ++j) row[rw + j * g.stride_w] = v[j];
        }
      }
    }
}

template void conv2d_im2col_backward_input<float>(const Conv2dGeometry&, const float*, const float*, float*);
template void conv2d_im2col_backward_input<double>(const Conv2dGeometry&, const double*, const double*, double*);

}  // namespace minidl
