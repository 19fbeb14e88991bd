// Reductions over any set of dims (negative dims wrap), with keepdim, and
// over the whole tensor. An empty `dims` means all dims.
#pragma once

#include <initializer_list>

#include "core/tensor.h"

namespace minidl {

Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim = false);
// unbiased: divide by n - 1 (PyTorch's default) instead of n.
Tensor var(const Tensor& x, bool unbiased = true);
Tensor var(const Tensor& x, const Shape& dims, bool unbiased = true, bool keepdim = false);
// var(x, {1}) reduces dim 1 (a one-element braced list would otherwise bind to bool).
Tensor var(const Tensor& x, std::initializer_list<int64_t> dims, bool unbiased = true, bool keepdim = false);
Tensor max(const Tensor& x);  // the largest element (gradient shared evenly by ties, as PyTorch)
Tensor min(const Tensor& x);
struct ValuesIndices {
  Tensor values;
  Tensor indices;  // int64
};
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);  // index into the flattened tensor
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);

}  // namespace minidl
