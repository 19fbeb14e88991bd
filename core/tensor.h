// Tensor: a cheap shared handle to a TensorImpl. Copying a Tensor aliases the
// same data and autograd state (as in PyTorch); clone() copies the data.
//
// Methods that compute something (reshape, sum, add_, ...) are thin wrappers
// over the free functions in ops/; they are defined in ops/tensor_methods.cpp.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "minidl/core/device.h"
#include "minidl/core/dtype.h"
#include "minidl/core/memory_format.h"
#include "minidl/core/scalar.h"
#include "minidl/core/shape.h"
#include "minidl/core/tensor_impl.h"

namespace minidl {

namespace autograd {
class Node;
}

// What a new tensor is made with (the factories below take one); t.options()
// gives t's dtype and device.
struct TensorOptions {
  DType dtype_ = kFloat32;
  Device device_ = kCPU;
  bool requires_grad_ = false;
  bool pinned_memory_ = false;  // CPU only: page-locked memory when a backend provides it

  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d) {}    // NOLINT: implicit, as torch::kFloat64
  TensorOptions(Device d) : device_(d) {}  // NOLINT
  TensorOptions dtype(DType d) const { auto o = *this; o.dtype_ = d; return o; }
  TensorOptions device(Device d) const { auto o = *this; o.device_ = d; return o; }
  TensorOptions requires_grad(bool r = true) const { auto o = *this; o.requires_grad_ = r; return o; }
  TensorOptions pinned_memory(bool p = true) const { auto o = *this; o.pinned_memory_ = p; return o; }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- identity and metadata -------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  const Shape& shape() const { return checked()->shape; }
  const Shape& sizes() const { return shape(); }
  int64_t size(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t numel() const { return checked()->numel(); }
  const Shape& strides() const { return checked()->strides; }
  int64_t stride(int64_t dim) const;
  int64_t storage_offset() const { return checked()->offset; }
  DType dtype() const { return checked()->dtype; }
  Device device() const { return checked()->device(); }
  TensorOptions options() const { return TensorOptions(dtype()).device(device()); }  // dtype + device
  bool is_cuda() const { return device().is_cuda(); }
  bool is_contiguous() const;
  // Laid out as `fmt` (core/memory_format.h; Contiguous or ChannelsLast).
  bool is_contiguous(MemoryFormat fmt) const;
  // ChannelsLast for a 4-D tensor whose strides order it NHWC (PyTorch's rule:
  // core/memory_format.h has_channels_last_strides), else Contiguous.
  MemoryFormat suggest_memory_format() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(dtype()); }

  // Raw access to the first element of this view. data_ptr<T>() checks that T
  // matches the dtype; the memory is on device(), which may not be the host.
  void* raw_data() const { return checked()->data(); }
  template <class T>
  T* data_ptr() const {
    MINIDL_CHECK(dtype() == dtype_v<T>, "data_ptr: expected a tensor of dtype ",
                 dtype_name(dtype_v<T>), ", got ", dtype_name(dtype()));
    return static_cast<T*>(raw_data());
  }

  // The single value of a one-element tensor, converted to T.
  template <class T = double>
  T item() const;
  // All values in row-major order, converted to T (copies to the host).
  template <class T>
  std::vector<T> to_vector() const;

  // ---- autograd ----------------------------------------------------------
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires_grad = true);
  bool is_leaf() const { return checked()->grad_fn == nullptr; }
  Tensor grad() const;             // undefined until a backward reaches this leaf
  void set_grad(const Tensor& g);  // set_grad(Tensor()) resets it (zero_grad(set_to_none))
  const std::shared_ptr<autograd::Node>& grad_fn() const { return checked()->grad_fn; }
  uint32_t output_nr() const { return checked()->output_nr; }
  // Runs backward from this tensor. A non-scalar needs `gradient` (same shape).
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // shares data, no history; not a view
  // Refuses a view (PyTorch's "Can't detach views in-place. Use detach() instead. ...").
  Tensor& detach_();
  bool is_view() const { return checked()->is_view; }  // made by a view op (PyTorch's is_view / _is_view)
  // Called with the gradient w.r.t. this tensor when it is computed; may return a
  // replacement (a defined Tensor) or Tensor() to keep it.
  HookId register_hook(GradHook hook) const;
  // Leaves only: called after the gradient was accumulated into .grad().
  HookId register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const;
  void remove_hook(HookId id) const;
  uint64_t version() const { return checked()->storage->version(); }
  void bump_version() const { checked()->storage->bump_version(); }

  // ---- conversions and views (ops/shape_ops.cpp, ops/copy.cpp) ------------
  Tensor to(DType dtype) const;
  // non_blocking: the caller does not need the copy finished on return (from
  // pinned host memory to a CUDA device); copies are synchronous otherwise.
  Tensor to(Device device, bool non_blocking = false) const;
  // A copy in page-locked host memory (this tensor if it is pinned already, or
  // if no backend provides pinned memory); CPU tensors only.
  Tensor pin_memory() const;
  bool is_pinned() const;
  Tensor clone() const;
  Tensor contiguous() const;
  Tensor contiguous(MemoryFormat fmt) const;  // this tensor if laid out so, else a differentiable copy
  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const;  // requires compatible strides
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;

  // ---- math (ops/) ---------------------------------------------------------
  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  Tensor var(bool unbiased = true) const;
  Tensor var(const Shape& dims, bool unbiased = true, bool keepdim = false) const;
  // var({1}) reduces dim 1: without this overload a one-element braced list
  // would bind to var(bool unbiased).
  Tensor var(std::initializer_list<int64_t> dims, bool unbiased = true, bool keepdim = false) const;
  // One dim: x.sum(1), x.mean(0, true), x.var(0) (not var(bool unbiased): see SingleDim).
  template <SingleDim D>
  Tensor sum(D dim, bool keepdim = false) const { return sum(Shape{static_cast<int64_t>(dim)}, keepdim); }
  template <SingleDim D>
  Tensor mean(D dim, bool keepdim = false) const { return mean(Shape{static_cast<int64_t>(dim)}, keepdim); }
  template <SingleDim D>
  Tensor var(D dim, bool unbiased = true, bool keepdim = false) const {
    return var(Shape{static_cast<int64_t>(dim)}, unbiased, keepdim);
  }
  Tensor max() const;
  Tensor min() const;
  Tensor argmax() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor relu() const;
  Tensor pow(Scalar exponent) const;

  Tensor add(const Tensor& other, double alpha = 1.0) const;  // this + alpha * other

  // In-place (bump the version counter; refused on tensors that need grad
  // while grad mode is on, as autograd cannot record them). As PyTorch, an
  // integer tensor refuses a floating scalar and div_ (the result would be float).
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(Scalar other);
  Tensor& sub_(const Tensor& other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(Scalar other);
  Tensor& div_(Scalar other);
  Tensor& zero_();
  // value converted as PyTorch's fill_: see checked_scalar_value below.
  Tensor& fill_(Scalar value);
  Tensor& copy_(const Tensor& src);  // broadcasts src; converts dtype

  std::string str() const;  // PyTorch-style printing

 private:
  const Storage* checked_storage() const { return checked()->storage.get(); }
  TensorImpl* checked() const {
    MINIDL_CHECK(impl_ != nullptr, "Tensor: operation on an undefined tensor");
    return impl_.get();
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// A new handle on base's data (same storage and dtype) with the given
// geometry (offset and strides in elements), without autograd history; what it
// copies is TensorImpl::set_view's (core/tensor_impl.h).
Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset);

// ---- factories (core/factories.cpp) ------------------------------------------

Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, Scalar value, TensorOptions options = {});
// An int64 dtype with integer bounds and step counts and steps in int64, exactly
// (PyTorch's); otherwise the count is ceil((end - start) / step) in double, and an
// integer dtype steps from the truncated start by the truncated step.
Tensor arange(Scalar end, TensorOptions options = {});
Tensor arange(Scalar start, Scalar end, Scalar step = 1, TensorOptions options = {});
Tensor rand(const Shape& shape, TensorOptions options = {});   // U[0, 1)
Tensor randn(const Shape& shape, TensorOptions options = {});  // N(0, 1)
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options = kInt64);
Tensor randperm(int64_t n, TensorOptions options = kInt64);
Tensor empty_like(const Tensor& t);
// PyTorch's empty_strided for dense strides (a permutation of a contiguous
// layout: channels-last and the like); refuses gaps and overlaps.
Tensor empty_strided(const Shape& shape, const Shape& strides, TensorOptions options = {});
Tensor empty(const Shape& shape, TensorOptions options, MemoryFormat fmt);
// fmt = Preserve keeps t's strides when t is dense (PyTorch's default for
// empty_like; minidl's one-argument empty_like stays contiguous).
Tensor empty_like(const Tensor& t, MemoryFormat fmt);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, Scalar value);
Tensor randn_like(const Tensor& t);
Tensor rand_like(const Tensor& t);

// From host values; the element type of `values` picks the dtype unless
// options say otherwise. The shape defaults to 1-D.
template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& shape = {}, TensorOptions options = dtype_v<T>);
Tensor tensor(std::initializer_list<double> values, const Shape& shape = {}, TensorOptions options = {});
Tensor scalar_tensor(Scalar value, TensorOptions options = {});

// The value a `dtype` tensor stores for `value` (full, fill_, scalar_tensor),
// converted as PyTorch's checked_convert: an integer into uint8 wraps (-1 is
// 255; past [-255, 255] refused), a floating value into an integer dtype
// truncates (uint8 takes [0, 256)); NaN, inf and values past the dtype are
// refused ("value cannot be converted to type float without overflow"), as
// are finite values past a floating dtype's largest. An int64 value past 2^53
// comes back rounded: callers store value.to_int64() instead.
double checked_scalar_value(DType dtype, Scalar value, const char* op);
// Copies host memory holding `shape` values of `dtype` into a new tensor (options: device, requires_grad).
Tensor from_buffer(const void* data, const Shape& shape, DType dtype, TensorOptions options = {});

}  // namespace minidl
