// Views and data movement: reshape/view/permute/narrow/select/expand share
// storage with their input; cat, stack and index_select copy.
// (Tensor has method forms of the views.)
#pragma once

#include <vector>

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl {

Tensor reshape(const Tensor& x, const Shape& shape);  // one dim may be -1
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor permute(const Tensor& x, const Shape& dims);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor expand(const Tensor& x, const Shape& shape);  // -1 keeps a size
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Picks slices along `dim` by an int64 index tensor (a batch by its indices).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

// ---- kernel interface (a backend registers its kernels here) ----------------

// x, index (int64, 1-D) and out contiguous; out = x with slice i along dim taken
// from slice index[i]. index_add: dx (zeroed) gets grad's slice i added at index[i].
using IndexSelectFn = void(const Tensor& x, const Tensor& index, int64_t dim, Tensor& out);
using IndexAddFn = void(const Tensor& grad, const Tensor& index, int64_t dim, Tensor& dx);

extern DispatchStub<IndexSelectFn> index_select_stub;
extern DispatchStub<IndexAddFn> index_add_stub;
void register_shape_cpu_kernels();

}  // namespace minidl
