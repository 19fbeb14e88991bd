// Shapes and strides are plain vectors of int64 (as PyTorch's IntArrayRef),
// with the few helpers every op needs: element counts, contiguous strides,
// broadcasting and negative-dim wrapping.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace minidl {

using Shape = std::vector<int64_t>;

// An integer type other than bool: one dim given alone (x.var(0), sum(x, 1)).
// The reductions take it through a template so that an int never converts to
// a bool parameter instead (var(bool unbiased): x.var(0) was the variance of
// every element; libtorch adds var(int dim) for the same trap).
template <class T>
concept SingleDim = std::integral<T> && !std::same_as<T, bool>;

// The element count. Throws minidl::Error on a negative dim or when the
// product overflows int64 (PyTorch: "numel: integer multiplication overflow").
int64_t numel_of(const Shape& shape);
// The element count, or nothing when a dim is negative or the running product
// overflows int64 (counted as PyTorch does: [2^40, 2^40, 0] overflows too).
std::optional<int64_t> checked_numel(const Shape& shape);
// The bytes of a contiguous `shape` of `element_size`-byte elements, or
// nothing when that does not fit int64 (or the shape is invalid).
std::optional<int64_t> checked_nbytes(const Shape& shape, size_t element_size);
Shape contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[3, 4]"

// NumPy/PyTorch broadcasting of two shapes; `op` names the caller in errors.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Wraps a possibly negative dim into [0, ndim); throws naming `op` otherwise.
// PyTorch: "Dimension out of range (expected to be in range of [-2, 1], but got 2)".
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

}  // namespace minidl
