// The per-element math of the CUDA copy and fill kernels, as __host__
// __device__ functions: the kernels (ops/cuda/copy.cu, fill.cu) call them on
// the GPU and tests/test_strided_index.cpp calls the very same code on the
// CPU, so the index math and the conversions are checked without a GPU.
// Plain C++ (no CUDA header): g++ compiles it for the CPU test.
#pragma once

#include <cstdint>

#include "minidl/core/half.h"

namespace minidl::cuda_detail {

inline constexpr int kMaxCopyDims = 16;

// A tensor view's geometry, passed to a kernel by value: element i of the
// row-major order (the order every minidl kernel walks) sits at
// offset(i) elements from the view's first element.
struct StridedIndex {
  int ndim = 0;
  bool contiguous = true;  // offset(i) == i: skips the division loop
  int64_t sizes[kMaxCopyDims] = {};
  int64_t strides[kMaxCopyDims] = {};

  MINIDL_HOST_DEVICE int64_t offset(int64_t linear) const {
    if (contiguous) return linear;
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {  // last dim varies fastest
      const int64_t size = sizes[d];
      off += (linear % size) * strides[d];
      linear /= size;
    }
    return off;
  }
};

// Elementwise conversion of copy_: minidl::convert (core/half.h), which is
// what the CPU copy kernel does, so CPU and CUDA copies give the same bits
// (float16/bfloat16 round to nearest even through float32).
template <class D, class S>
MINIDL_HOST_DEVICE inline void copy_element(D* dst, const StridedIndex& di, const S* src, const StridedIndex& si,
                                            int64_t i) {
  dst[di.offset(i)] = ::minidl::convert<D>(src[si.offset(i)]);
}

// Grid-stride loop bounds: enough 256-thread blocks to cover n, at most
// 65535 * 8 (the loop covers the rest); at least 1.
inline constexpr int kThreadsPerBlock = 256;
MINIDL_HOST_DEVICE inline unsigned blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const int64_t cap = int64_t{65535} * 8;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

}  // namespace minidl::cuda_detail
