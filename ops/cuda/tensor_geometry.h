// A tensor's geometry as the StridedIndex kernels take (host side): size-1
// dims dropped and adjacent dims merged where the memory allows (dim d and
// d+1 merge when stride[d] == stride[d+1] * size[d+1]), so a contiguous view
// becomes one dim and a transposed matrix stays two. Plain C++: the CPU test
// (tests/test_strided_index.cpp) checks it too.
#pragma once

#include "minidl/core/check.h"
#include "minidl/core/tensor.h"
#include "minidl/ops/cuda/strided_index.h"

namespace minidl::cuda_detail {

inline StridedIndex strided_index(const Tensor& t, const char* op) {
  StridedIndex r;
  int64_t sizes[64], strides[64];
  int n = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 1) continue;
    if (n > 0 && strides[n - 1] == t.stride(d) * t.size(d)) {  // merges into the previous dim
      sizes[n - 1] *= t.size(d);
      strides[n - 1] = t.stride(d);
      continue;
    }
    MINIDL_CHECK(n < 64, op, ": too many dims");
    sizes[n] = t.size(d);
    strides[n] = t.stride(d);
    ++n;
  }
  MINIDL_CHECK(n <= kMaxCopyDims, op, ": a CUDA kernel takes views of at most ", kMaxCopyDims,
               " non-mergeable dims, got ", n);
  r.ndim = n;
  r.contiguous = n == 0 || (n == 1 && strides[0] == 1);
  for (int d = 0; d < n; ++d) {
    r.sizes[d] = sizes[d];
    r.strides[d] = strides[d];
  }
  return r;
}

}  // namespace minidl::cuda_detail
