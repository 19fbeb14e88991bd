#include "minidl/core/shape.h"

#include <algorithm>

#include "minidl/core/check.h"

namespace minidl {

std::optional<int64_t> checked_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape)
    if (s < 0 || __builtin_mul_overflow(n, s, &n)) return std::nullopt;
  return n;
}

std::optional<int64_t> checked_nbytes(const Shape& shape, size_t element_size) {
  int64_t n = static_cast<int64_t>(element_size);
  for (int64_t s : shape)
    if (s < 0 || __builtin_mul_overflow(n, s, &n)) return std::nullopt;
  return n;
}

int64_t numel_of(const Shape& shape) {
  if (auto n = checked_numel(shape)) return *n;
  for (int64_t s : shape)
    MINIDL_CHECK(s >= 0, "numel: negative dimension ", s, " in sizes ", shape_str(shape));
  MINIDL_FAIL("numel: integer multiplication overflow for sizes ", shape_str(shape));
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = n; i-- > 0;) {  // from the last dim: PyTorch names the trailing-most mismatch
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MINIDL_CHECK(da == db || da == 1 || db == 1, op, ": The size of tensor a (", da,
                 ") must match the size of tensor b (", db, ") at non-singleton dimension ", i,
                 "; got shapes ", shape_str(a), " and ", shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  MINIDL_CHECK(dim >= lo && dim <= hi, op,
               ": Dimension out of range (expected to be in range of [", lo, ", ", hi,
               "], but got ", dim, ")");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

}  // namespace minidl
