// A same-dtype copy whose source is a transposed view (x.transpose(0, 1)
// .contiguous(), NCHW -> NHWC permutes): after merging dims, the innermost two
// are [M, N] with dst strides (ldd, 1) and src strides (1, lds). Element by
// element, every read of such a copy is a new cache line and often a new page;
// ops/cpu/transpose_copy.cpp copies it in tiles instead. Internal to ops/cpu/.
#pragma once

#include "minidl/core/tensor.h"

namespace minidl {

// Copies src into dst (same dtype, same shape) when they have that layout and
// the tiles pay (both sides >= 8); false (nothing written) otherwise.
bool copy_transposed_cpu(const Tensor& dst, const Tensor& src);

}  // namespace minidl
