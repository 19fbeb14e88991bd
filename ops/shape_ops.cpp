// Views and data movement.
//   reshape/view/flatten/unsqueeze/squeeze: y shares x's storage; dx = dy reshaped back.
//   permute/transpose: dx = dy permuted by the inverse permutation.
//   narrow/select: dx = zeros with dy written into the same window.
//   expand: stride 0 on expanded dims; dx = dy summed over them.
//   cat/stack: copy; dx_i = the slice of dy that came from x_i.
//   index_select: copy; dx = zeros with dy rows added at the indices (repeats accumulate).
// None saves a tensor for backward, only shapes and positions; backward results overwrite.
// CPU kernels: ops/cpu/shape_ops.cpp.
#include "minidl/ops/shape_ops.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/function.h"
#include "minidl/ops/binary.h"

namespace minidl {

DispatchStub<IndexSelectFn> index_select_stub("index_select");
DispatchStub<IndexAddFn> index_add_stub("index_select_backward");

namespace {

Shape infer_shape(const Shape& shape, int64_t numel) {
  Shape out = shape;
  int64_t known = 1;
  std::optional<size_t> infer;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      MINIDL_CHECK(!infer, "only one dimension can be inferred");
      infer = i;
    } else {
      MINIDL_CHECK(out[i] >= 0, "invalid shape dimension ", out[i], " at index ", i, " of shape ",
                   shape_str(shape));
      MINIDL_CHECK(!__builtin_mul_overflow(known, out[i], &known),
                   "numel: integer multiplication overflow for shape ", shape_str(shape));
    }
  }
  if (infer) {
    MINIDL_CHECK(known != 0 || numel != 0, "cannot reshape tensor of 0 elements into shape ", shape_str(shape),
                 " because the unspecified dimension size -1 can be any value and is ambiguous");
    MINIDL_CHECK(known != 0 && numel % known == 0, "shape '", shape_str(shape),
                 "' is invalid for input of size ", numel);
    out[*infer] = numel / known;
  }
  MINIDL_CHECK(numel_of(out) == numel, "shape '", shape_str(shape), "' is invalid for input of size ", numel);
  return out;
}

// Strides that let `new_shape` view memory laid out as (old_shape, old_strides),
// or nothing when the view would have to cross non-contiguous chunks
// (the algorithm of ATen's computeStride).
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape) {
  if (old_shape.empty()) return Shape(new_shape.size(), 1);
  if (numel_of(old_shape) == 0) return contiguous_strides(new_shape);
  Shape new_strides(new_shape.size());
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

struct Reshape : autograd::Function<Reshape> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Shape& shape, bool must_view) {
    ctx->saved_data["shape"] = x.shape();
    const Shape target = infer_shape(shape, x.numel());
    if (auto strides = view_strides(x.shape(), x.strides(), target))
      return make_view(x, target, *strides, x.storage_offset());
    MINIDL_CHECK(!must_view,
                 "view size is not compatible with input tensor's size and stride (at least one "
                 "dimension spans across two contiguous subspaces). Use .reshape(...) instead.");
    Tensor c = x.clone();
    Tensor r = make_view(c, target, contiguous_strides(target), 0);
    r.impl()->is_view = false;  // a copy, not a view of x (PyTorch's reshape: _unsafe_view of a clone)
    return r;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {grads[0].reshape(ctx->saved_data["shape"].to_int_list()), Tensor(), Tensor()};
  }
};

struct Permute : autograd::Function<Permute> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Shape& dims) {
    const int64_t n = x.dim();
    MINIDL_CHECK(static_cast<int64_t>(dims.size()) == n, "permute(sparse_coo): number of dimensions in ",
                 "the tensor input does not match the length of the desired ordering of dimensions i.e. "
                 "input.dim() = ", n, " is not equal to len(dims) = ", dims.size());
    Shape shape(n), strides(n), inverse(n);
    std::vector<bool> used(n, false);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t d = wrap_dim(dims[i], n, "permute");
      MINIDL_CHECK(!used[d], "permute(): duplicate dims are not allowed.");
      used[d] = true;
      shape[i] = x.shape()[d];
      strides[i] = x.strides()[d];
      inverse[d] = i;
    }
    ctx->saved_data["inverse"] = inverse;
    return make_view(x, shape, strides, x.storage_offset());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {grads[0].permute(ctx->saved_data["inverse"].to_int_list()), Tensor()};
  }
};

// narrow and select: a window [start, start + length) along dim, optionally
// dropping that dim (select).
struct Window : autograd::Function<Window> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, int64_t dim, int64_t start, int64_t length,
                        bool drop_dim) {
    ctx->saved_data["shape"] = x.shape();
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["start"] = start;
    ctx->saved_data["length"] = length;
    ctx->saved_data["drop"] = drop_dim;
    Shape shape = x.shape(), strides = x.strides();
    const int64_t offset = x.storage_offset() + start * strides[dim];
    if (drop_dim) {
      shape.erase(shape.begin() + dim);
      strides.erase(strides.begin() + dim);
    } else {
      shape[dim] = length;
    }
    return make_view(x, shape, strides, offset);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Tensor g = grads[0];
    const Shape input_shape = ctx->saved_data["shape"].to_int_list();
    const int64_t dim = ctx->saved_data["dim"].to_int(), start = ctx->saved_data["start"].to_int();
    const int64_t length = ctx->saved_data["length"].to_int();
    Tensor dx = zeros(input_shape, g.options());
    Tensor window = dx.narrow(dim, start, length);
    window.copy_(ctx->saved_data["drop"].to_bool() ? g.unsqueeze(dim) : g);
    return {dx, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

Tensor window(const Tensor& x, int64_t dim, int64_t start, int64_t length, bool drop_dim) {
  return Window::apply(x, dim, start, length, drop_dim);
}

struct Expand : autograd::Function<Expand> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Shape& shape) {
    ctx->saved_data["shape"] = x.shape();
    const int64_t n = static_cast<int64_t>(shape.size()), lead = n - x.dim();
    MINIDL_CHECK(lead >= 0, "expand: the number of sizes provided (", n, ") must be greater or equal to ",
                 "the number of dimensions in the tensor (", x.dim(), ")");
    Shape out(n), strides(n);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t src = i - lead;
      const int64_t have = src >= 0 ? x.shape()[src] : 1;
      const int64_t want = shape[i] == -1 ? have : shape[i];
      MINIDL_CHECK(src >= 0 || shape[i] != -1, "expand: -1 is not allowed in a leading, non-existing dimension");
      MINIDL_CHECK(want >= 0, "expand: the expanded size of the tensor (", want, ") must be non-negative (only -1 "
                   "means keep the size); target sizes: ", shape_str(shape));
      MINIDL_CHECK(have == want || have == 1, "The expanded size of the tensor (", want,
                   ") must match the existing size (", have, ") at non-singleton dimension ", i,
                   ".  Target sizes: ", shape_str(shape), ".  Tensor sizes: ", shape_str(x.shape()));
      out[i] = want;
      strides[i] = (src >= 0 && have == want) ? x.strides()[src] : 0;
    }
    return make_view(x, out, strides, x.storage_offset());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {sum_to_shape(grads[0], ctx->saved_data["shape"].to_int_list()), Tensor()};
  }
};

// PyTorch's legacy empty tensor: 1-D with no elements (empty({0})). cat
// leaves it out of the shape checks and the copy, so acc = cat({acc, batch})
// may start from one; its gradient is zeros({0}).
bool is_legacy_empty(const Tensor& t) { return t.dim() == 1 && t.numel() == 0; }

struct Cat : autograd::Function<Cat> {
  static Tensor forward(AutogradContext* ctx, const variable_list& tensors, int64_t dim) {
    MINIDL_CHECK(!tensors.empty(), "torch.cat(): expected a non-empty list of Tensors");
    for (size_t i = 0; i < tensors.size(); ++i) {
      MINIDL_CHECK(!tensors[i].defined() || tensors[i].dim() > 0, "zero-dimensional tensor (at position ", i,
                   ") cannot be concatenated");
      MINIDL_CHECK(tensors[i].defined(), "cat: tensor ", i, " is undefined");
    }
    // Shapes are checked against the first tensor that is not a legacy empty one.
    const auto kept =
        std::find_if(tensors.begin(), tensors.end(), [](const Tensor& t) { return !is_legacy_empty(t); });
    const Tensor& first = kept == tensors.end() ? tensors[0] : *kept;
    // All legacy empty: an empty result, whatever dim is (PyTorch does not check it).
    dim = kept == tensors.end() ? 0 : wrap_dim(dim, first.dim(), "cat");
    Shape shape = first.shape();
    std::vector<int64_t> sizes;  // -1: a legacy empty tensor, skipped
    shape[dim] = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      // Skipped tensors too: minidl does not promote (PyTorch's result dtype counts them).
      MINIDL_CHECK(t.dtype() == first.dtype() && t.device() == first.device(), "cat: expected all tensors "
                   "to have the same dtype and device, got ", dtype_name(first.dtype()), " on ", first.device(),
                   " and ", dtype_name(t.dtype()), " on ", t.device(), " (tensor ", i, ")");
      if (is_legacy_empty(t)) {
        sizes.push_back(-1);
        continue;
      }
      MINIDL_CHECK(t.dim() == first.dim(), "Tensors must have same number of dimensions: got ", first.dim(),
                   " and ", t.dim());
      for (int64_t d = 0; d < t.dim(); ++d) {
        MINIDL_CHECK(d == dim || t.shape()[d] == first.shape()[d], "Sizes of tensors must match except in "
                     "dimension ", dim, ". Expected size ", first.shape()[d], " but got size ", t.shape()[d],
                     " for tensor number ", i, " in the list.");
      }
      sizes.push_back(t.shape()[dim]);
      shape[dim] += t.shape()[dim];
    }
    Tensor out = empty(shape, first.options());
    int64_t start = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (sizes[i] < 0) continue;
      out.narrow(dim, start, sizes[i]).copy_(tensors[i]);
      start += sizes[i];
    }
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["sizes"] = sizes;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t dim = ctx->saved_data["dim"].to_int();
    variable_list out;
    int64_t start = 0;
    for (int64_t size : ctx->saved_data["sizes"].to_int_list()) {
      if (size < 0) {
        out.push_back(zeros({0}, grads[0].options()));
        continue;
      }
      out.push_back(grads[0].narrow(dim, start, size));
      start += size;
    }
    out.emplace_back();  // dim
    return out;
  }
};

struct IndexSelect : autograd::Function<IndexSelect> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, int64_t dim, const Tensor& index) {
    MINIDL_CHECK(index.defined() && index.dtype() == kInt64,
                 "index_select(): Expected dtype int64 for index, got ",
                 index.defined() ? dtype_name(index.dtype()) : "an undefined tensor");
    MINIDL_CHECK(index.dim() <= 1, "index_select(): Index is supposed to be a vector, got ", index.dim(), "-D");
    MINIDL_CHECK(index.device() == x.device(), "index_select(): expected index on ", x.device(), ", got ",
                 index.device());
    dim = wrap_dim(dim, x.dim(), "index_select");
    MINIDL_CHECK(x.dim() > 0 || index.numel() == 1, "index_select(): Index to scalar can have only 1 value, got ",
                 index.numel(), " value(s)");
    Tensor xc = x.contiguous(), idx = index.contiguous().reshape({index.numel()});
    const int64_t size = x.dim() == 0 ? 1 : x.shape()[dim];
    if (idx.device().is_cpu()) {
      const int64_t* p = idx.data_ptr<int64_t>();
      for (int64_t i = 0; i < idx.numel(); ++i)
        MINIDL_CHECK(p[i] >= 0 && p[i] < size, "index out of range in self: index ", p[i], " at position ", i,
                     " for dimension ", dim, " of size ", size);
    }
    Shape shape = x.shape();
    if (!shape.empty()) shape[dim] = idx.numel();
    Tensor out = empty(shape, x.options());
    index_select_stub(x.device())(xc, idx, dim, out);
    ctx->save_for_backward({idx});
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["shape"] = x.shape();
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Tensor idx = ctx->get_saved_variables()[0];
    const int64_t dim = ctx->saved_data["dim"].to_int();
    Tensor g = grads[0].contiguous();
    Tensor dx = zeros(ctx->saved_data["shape"].to_int_list(), g.options());
    index_add_stub(g.device())(g, idx, dim, dx);
    return {dx, Tensor(), Tensor()};
  }
};

void check_defined(const Tensor& x, const char* op) { MINIDL_CHECK(x.defined(), op, ": the input tensor is undefined"); }

}  // namespace


Tensor reshape(const Tensor& x, const Shape& shape) {
  check_defined(x, "reshape");
  return Reshape::apply(x, shape, false);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  check_defined(x, "flatten");
  if (x.dim() == 0) {  // dims still checked, as PyTorch (0 and -1 name a 0-d tensor's dim)
    wrap_dim(start_dim, 0, "flatten");
    wrap_dim(end_dim, 0, "flatten");
    return x.reshape({1});
  }
  start_dim = wrap_dim(start_dim, x.dim(), "flatten");
  end_dim = wrap_dim(end_dim, x.dim(), "flatten");
  MINIDL_CHECK(start_dim <= end_dim, "flatten() has invalid args: start_dim cannot come after end_dim");
  Shape shape(x.shape().begin(), x.shape().begin() + start_dim);
  int64_t merged = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) merged *= x.shape()[d];
  shape.push_back(merged);
  shape.insert(shape.end(), x.shape().begin() + end_dim + 1, x.shape().end());
  return x.reshape(shape);
}

Tensor permute(const Tensor& x, const Shape& dims) {
  check_defined(x, "permute");
  return Permute::apply(x, dims);
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  check_defined(x, "transpose");
  const int64_t n = x.dim();
  if (n == 0) {
    wrap_dim(dim0, 0, "transpose");
    wrap_dim(dim1, 0, "transpose");
    return x;
  }
  Shape dims(n);
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[wrap_dim(dim0, n, "transpose")], dims[wrap_dim(dim1, n, "transpose")]);
  return x.permute(dims);
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  check_defined(x, "narrow");
  MINIDL_CHECK(x.dim() > 0, "narrow() cannot be applied to a 0-dim tensor.");
  dim = wrap_dim(dim, x.dim(), "narrow");
  const int64_t size = x.shape()[dim];
  MINIDL_CHECK(start >= -size && start <= size, "start out of range (expected to be in range of [", -size, ", ",
               size, "], but got ", start, ")");
  if (start < 0) start += size;
  MINIDL_CHECK(length >= 0, "narrow(): length must be non-negative.");
  // length <= size - start: start + length could overflow int64.
  MINIDL_CHECK(length <= size - start, "start (", start, ") + length (", length,
               ") exceeds dimension size (", size, ").");
  return window(x, dim, start, length, false);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  check_defined(x, "select");
  MINIDL_CHECK(x.dim() > 0, "select() cannot be applied to a 0-dim tensor.");
  dim = wrap_dim(dim, x.dim(), "select");
  const int64_t size = x.shape()[dim];
  MINIDL_CHECK(index >= -size && index < size, "select(): index ", index, " out of range for tensor of size ",
               shape_str(x.shape()), " at dimension ", dim);
  if (index < 0) index += size;
  return window(x, dim, index, 1, true);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  check_defined(x, "unsqueeze");
  dim = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape shape = x.shape();
  shape.insert(shape.begin() + dim, 1);
  return x.reshape(shape);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  check_defined(x, "squeeze");
  dim = wrap_dim(dim, x.dim(), "squeeze");
  if (x.dim() == 0) return x;
  if (x.shape()[dim] != 1) return x;
  Shape shape = x.shape();
  shape.erase(shape.begin() + dim);
  return x.reshape(shape);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  check_defined(x, "expand");
  return Expand::apply(x, shape);
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) { return Cat::apply(amp::cast_list(amp::AmpOp::cat, tensors), dim); }

Tensor stack(const std::vector<Tensor>& tensors_in, int64_t dim) {
  const std::vector<Tensor> tensors = amp::cast_list(amp::AmpOp::stack, tensors_in);
  MINIDL_CHECK(!tensors.empty(), "stack expects a non-empty TensorList");
  for (size_t i = 1; i < tensors.size(); ++i)
    MINIDL_CHECK(tensors[i].shape() == tensors[0].shape(), "stack expects each tensor to be equal size, but got ",
                 shape_str(tensors[0].shape()), " at entry 0 and ", shape_str(tensors[i].shape()), " at entry ", i);
  dim = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(t.unsqueeze(dim));
  return cat(parts, dim);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_defined(x, "index_select");
  return IndexSelect::apply(x, dim, index);
}

// ---- Tensor methods -----------------------------------------------------------
Tensor Tensor::reshape(const Shape& shape) const { return minidl::reshape(*this, shape); }
Tensor Tensor::view(const Shape& shape) const {
  MINIDL_CHECK(defined(), "view: the input tensor is undefined");
  return Reshape::apply(*this, shape, true);
}
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const { return minidl::flatten(*this, start_dim, end_dim); }
Tensor Tensor::permute(const Shape& dims) const { return minidl::permute(*this, dims); }
Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const { return minidl::transpose(*this, dim0, dim1); }
Tensor Tensor::t() const {
  MINIDL_CHECK(dim() <= 2, "t() expects a tensor with <= 2 dimensions, but self is ", dim(), "D");
  return dim() < 2 ? *this : transpose(0, 1);
}
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return minidl::narrow(*this, dim, start, length);
}
Tensor Tensor::select(int64_t dim, int64_t index) const { return minidl::select(*this, dim, index); }
Tensor Tensor::unsqueeze(int64_t dim) const { return minidl::unsqueeze(*this, dim); }
Tensor Tensor::squeeze(int64_t dim) const { return minidl::squeeze(*this, dim); }
Tensor Tensor::expand(const Shape& shape) const { return minidl::expand(*this, shape); }
Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return minidl::index_select(*this, dim, index); }

}  // namespace minidl
