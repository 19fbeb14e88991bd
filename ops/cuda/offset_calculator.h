// Strided N-d index math shared by the CUDA elementwise and reduction kernels
// and by the CPU tests (tests/test_cuda_kernel_math.cpp): plain C++ with
// MINIDL_HOST_DEVICE, no CUDA header, so g++ compiles it too.
//
// OffsetCalculator<N> maps a linear index over a shape (row-major, last dim
// fastest) to the element offsets of N operands that share the shape but have
// their own strides (views, broadcasting with stride 0), as PyTorch's
// OffsetCalculator.cuh. make_offset_calculator first drops size-1 dims and
// merges adjacent dims that are contiguous for every operand (the same
// collapsing as ops/cpu/strided_loop.h's for_each_row), so a contiguous
// tensor is one dim and costs one division per element.
#pragma once

#include <cstdint>

#include "minidl/core/half.h"  // MINIDL_HOST_DEVICE
#include "minidl/ops/cuda/int_divider.h"

namespace minidl::cuda_math {

// More dims than this after collapsing is refused by the host (checked by
// the caller, which names the op); PyTorch's MAX_DIMS is 25.
inline constexpr int kMaxDims = 16;

template <int N>
struct Offsets {
  int64_t v[N];
};

template <int N>
struct OffsetCalculator {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};       // innermost first
  int64_t strides[N][kMaxDims] = {};  // element strides per operand, innermost first
  // Set by make_offset_calculator when every linear index fits 31 bits: the
  // divisions by sizes[d] go through precomputed 32-bit dividers (a 64-bit
  // division is a ~100-instruction routine on a GPU), as PyTorch's IntDivider.
  bool fast = false;
  IntDivider divs[kMaxDims];

  // linear < the product of sizes. The outermost dim needs no division, so a
  // collapsed contiguous layout (one dim) costs none.
  MINIDL_HOST_DEVICE Offsets<N> get(int64_t linear) const {
    Offsets<N> out;
    for (int k = 0; k < N; ++k) out.v[k] = 0;
    if (fast) {
      uint32_t rest = static_cast<uint32_t>(linear);
      for (int d = 0; d + 1 < ndim; ++d) {
        const uint32_t q = divs[d].div(rest);
        const int64_t i = rest - q * divs[d].divisor;
        rest = q;
        for (int k = 0; k < N; ++k) out.v[k] += i * strides[k][d];
      }
      linear = rest;
    } else {
      for (int d = 0; d + 1 < ndim; ++d) {
        const int64_t size = sizes[d];
        const int64_t i = linear % size;
        linear /= size;
        for (int k = 0; k < N; ++k) out.v[k] += i * strides[k][d];
      }
    }
    if (ndim > 0)
      for (int k = 0; k < N; ++k) out.v[k] += linear * strides[k][ndim - 1];
    return out;
  }
};

// Builds the calculator for `ndim` dims of `shape` (outermost first, as a
// Tensor's shape) with strides[k] the k-th operand's strides. Returns false
// when more than kMaxDims dims remain after collapsing. A shape with a zero
// dim is the caller's business (nothing to launch).
template <int N>
bool make_offset_calculator(const int64_t* shape, int ndim, const int64_t* const* strides, OffsetCalculator<N>& calc) {
  calc = OffsetCalculator<N>();
  // Walk from the innermost dim out, merging dim d into the current (inner)
  // collapsed dim when every operand's stride[d] == stride[inner] * size[inner].
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    bool merge = calc.ndim > 0;
    for (int k = 0; k < N && merge; ++k)
      merge = strides[k][d] == calc.strides[k][calc.ndim - 1] * calc.sizes[calc.ndim - 1];
    if (merge) {
      calc.sizes[calc.ndim - 1] *= shape[d];
      continue;
    }
    if (calc.ndim == kMaxDims) return false;
    calc.sizes[calc.ndim] = shape[d];
    for (int k = 0; k < N; ++k) calc.strides[k][calc.ndim] = strides[k][d];
    ++calc.ndim;
  }
  int64_t numel = 1;
  for (int d = 0; d < calc.ndim && numel < kIntDividerLimit; ++d) numel *= calc.sizes[d];
  calc.fast = numel > 0 && numel < kIntDividerLimit;  // an empty shape: no divider by zero
  if (calc.fast)
    for (int d = 0; d < calc.ndim; ++d) calc.divs[d] = IntDivider(calc.sizes[d]);
  return true;
}

}  // namespace minidl::cuda_math
