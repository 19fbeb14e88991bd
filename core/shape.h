// Shapes and strides are plain vectors of int64 (as PyTorch's IntArrayRef),
// with the few helpers every op needs: element counts, contiguous strides,
// broadcasting and negative-dim wrapping.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace minidl {

using Shape = std::vector<int64_t>;

int64_t numel_of(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[3, 4]"

// NumPy/PyTorch broadcasting of two shapes; `op` names the caller in errors.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Wraps a possibly negative dim into [0, ndim); throws naming `op` otherwise.
// PyTorch: "Dimension out of range (expected to be in range of [-2, 1], but got 2)".
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

}  // namespace minidl
