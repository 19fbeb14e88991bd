// Reductions over any set of dims (negative dims wrap), with keepdim, and
// over the whole tensor. An empty `dims` means all dims.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

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
// The largest / smallest value over `dims` (empty: all dims), as torch.amax /
// torch.amin: values only; the gradient is shared evenly by the elements equal
// to the result within each reduced slice (PyTorch's rule; a NaN result gets nan).
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x);  // index into the flattened tensor
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);

// One dim: sum(x, 1), var(x, 0) (not var(x, bool unbiased): see SingleDim in core/shape.h).
template <SingleDim D>
Tensor sum(const Tensor& x, D dim, bool keepdim = false) {
  return sum(x, Shape{static_cast<int64_t>(dim)}, keepdim);
}
template <SingleDim D>
Tensor mean(const Tensor& x, D dim, bool keepdim = false) {
  return mean(x, Shape{static_cast<int64_t>(dim)}, keepdim);
}
template <SingleDim D>
Tensor var(const Tensor& x, D dim, bool unbiased = true, bool keepdim = false) {
  return var(x, Shape{static_cast<int64_t>(dim)}, unbiased, keepdim);
}
template <SingleDim D>
Tensor amax(const Tensor& x, D dim, bool keepdim = false) {
  return amax(x, Shape{static_cast<int64_t>(dim)}, keepdim);
}
template <SingleDim D>
Tensor amin(const Tensor& x, D dim, bool keepdim = false) {
  return amin(x, Shape{static_cast<int64_t>(dim)}, keepdim);
}

// ---- kernel interface (a backend registers its kernels here) ----------------

inline constexpr int64_t kReduceChunk = 16384;  // elements per partial result

// Where each row's elements live, relative to a base pointer: element j of
// row r is at row_start(r) + seg_offset[j / seg_len] + j % seg_len, where
// row_start walks the kept dims (row_shape, row_strides) row-major.
struct RowLayout {
  Shape row_shape;
  Shape row_strides;
  int64_t rows = 1;
  std::vector<int64_t> seg_offset;
  // The reduced dims outside a segment, whose offsets seg_offset enumerates
  // row-major (empty: one segment at 0). The CUDA kernels compute seg_offset[s]
  // from them instead of reading a table uploaded per call.
  Shape seg_shape, seg_strides;
  int64_t seg_len = 1;
  int64_t len = 1;  // n
  int64_t chunk_len = kReduceChunk;  // elements per partial result
  bool chunk_major = false;          // reduce chunk c of every row before chunk c + 1
};

// Row kernels read base's data through a RowLayout; out, var, mean, values and
// indices are contiguous with one element per row (values or indices may be undefined).
using SumRowsFn = void(const Tensor& base, const RowLayout& rows, const Tensor& out, double scale);
// x: contiguous [A, R, B]; out[a, b] = scale * sum_r x[a, r, b].
using SumColumnsFn = void(const Tensor& x, const Tensor& out, double scale);
using VarRowsFn = void(const Tensor& base, const RowLayout& rows, const Tensor& var, const Tensor& mean,
                       int64_t correction);
using ExtremumRowsFn = void(const Tensor& base, const RowLayout& rows, const Tensor& values,
                            const Tensor& indices, bool is_max);
// dx (contiguous, x's shape) = scale * g, g broadcast to x's shape.
using ExpandBackwardFn = void(const Tensor& g, const Tensor& dx, double scale);
// dx = scale * g * (x - m), g and m broadcast to x's shape.
using VarBackwardFn = void(const Tensor& g, const Tensor& x, const Tensor& m, const Tensor& dx, double scale);
// dx[..., idx, ...] = g along `dim` (dx comes zeroed); dx, g, idx have the keepdim shape.
using IndexBackwardFn = void(const Tensor& g, const Tensor& idx, const Tensor& dx, int64_t dim);
// dx = g / count where x == y (or both NaN), 0 elsewhere; g, y 0-d.
using EvenBackwardFn = void(const Tensor& g, const Tensor& x, const Tensor& y, const Tensor& dx);

extern DispatchStub<SumRowsFn> sum_rows_stub;
extern DispatchStub<SumColumnsFn> sum_columns_stub;
extern DispatchStub<VarRowsFn> var_rows_stub;
extern DispatchStub<ExtremumRowsFn> extremum_rows_stub;
extern DispatchStub<ExpandBackwardFn> expand_backward_stub;
extern DispatchStub<VarBackwardFn> var_backward_stub;
extern DispatchStub<IndexBackwardFn> index_backward_stub;
extern DispatchStub<EvenBackwardFn> even_backward_stub;
void register_reduce_cpu_kernels();

}  // namespace minidl
