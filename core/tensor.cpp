#include "minidl/core/tensor.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/autograd/engine.h"

namespace minidl {

// PyTorch's dims: a 0-d tensor has none to ask about (wrap_dim lets ops treat it as 1-d).
int64_t Tensor::size(int64_t dim) const {
  MINIDL_CHECK(this->dim() > 0, "Dimension specified as ", dim, " but tensor has no dimensions");
  return shape()[wrap_dim(dim, this->dim(), "size")];
}

int64_t Tensor::stride(int64_t dim) const {
  MINIDL_CHECK(this->dim() > 0, "Dimension specified as ", dim, " but tensor has no dimensions");
  return strides()[wrap_dim(dim, this->dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  const TensorImpl* t = checked();
  if (t->numel() == 0) return true;  // no element to misplace (as PyTorch)
  int64_t expected = 1;
  for (size_t i = t->shape.size(); i-- > 0;) {
    if (t->shape[i] == 1) continue;
    if (t->strides[i] != expected) return false;
    expected *= t->shape[i];
  }
  return true;
}

bool Tensor::is_contiguous(MemoryFormat fmt) const {
  MINIDL_CHECK(fmt != MemoryFormat::Preserve, "is_contiguous: memory format ", memory_format_name(fmt),
               " is not supported");
  return strides_match(shape(), strides(), fmt);
}

MemoryFormat Tensor::suggest_memory_format() const {
  return has_channels_last_strides(shape(), strides()) ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

namespace {

// Whether v converts to T: an integral T takes a float (truncated) or a
// wider integer only within its range (-0.5 is refused for uint8, as
// PyTorch's c10::overflows); a float beyond it or NaN would be undefined
// behaviour, a wider integer would wrap.
template <class T, class S>
bool converts_to(S v) {
  if constexpr (!std::is_integral_v<T> || std::is_same_v<T, bool>) {
    return true;
  } else if constexpr (std::is_integral_v<S>) {
    return std::in_range<T>(v);
  } else {
    const double d = convert<double>(v);
    return d >= static_cast<double>(std::numeric_limits<T>::lowest()) &&
           d < static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
  }
}

template <class T>
const char* c_type_name() {
  if constexpr (std::is_same_v<T, int64_t>) return "int64_t";
  else if constexpr (std::is_same_v<T, uint8_t>) return "uint8_t";
  else if constexpr (std::is_same_v<T, int>) return "int";
  else return "the requested type";
}

}  // namespace

template <class T>
T Tensor::item() const {
  MINIDL_CHECK(numel() == 1, "a Tensor with ", numel(), " elements cannot be converted to Scalar");
  // Off the CPU this is the one host synchronization a training step makes
  // on purpose (the logged loss): copy the value, as PyTorch does.
  const Tensor host = device().is_cpu() ? *this : to(kCPU);
  return MINIDL_DISPATCH_ALL_AND_HALF(dtype(), "item", [&] {
    const scalar_t v = *static_cast<const scalar_t*>(host.raw_data());
    MINIDL_CHECK(converts_to<T>(v), "item: value cannot be converted to type ", c_type_name<T>(), " without overflow");
    return convert<T>(v);
  });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = to(kCPU).contiguous();
  std::vector<T> out(static_cast<size_t>(c.numel()));
  MINIDL_DISPATCH_ALL_AND_HALF(c.dtype(), "to_vector", [&] {
    const scalar_t* p = static_cast<const scalar_t*>(c.raw_data());
    for (size_t i = 0; i < out.size(); ++i) {
      MINIDL_CHECK(converts_to<T>(p[i]), "to_vector: value ", convert<double>(p[i]), " (element ", i,
                   ") cannot be converted to type ", c_type_name<T>(), " without overflow");
      out[i] = convert<T>(p[i]);
    }
  });
  return out;
}

#define MINIDL_INSTANTIATE_ACCESSORS_(T)       \
  template T Tensor::item<T>() const;          \
  template std::vector<T> Tensor::to_vector<T>() const;
MINIDL_INSTANTIATE_ACCESSORS_(float)
MINIDL_INSTANTIATE_ACCESSORS_(double)
MINIDL_INSTANTIATE_ACCESSORS_(int64_t)
MINIDL_INSTANTIATE_ACCESSORS_(uint8_t)
MINIDL_INSTANTIATE_ACCESSORS_(int)
MINIDL_INSTANTIATE_ACCESSORS_(bool)
MINIDL_INSTANTIATE_ACCESSORS_(Half)
MINIDL_INSTANTIATE_ACCESSORS_(BFloat16)
#undef MINIDL_INSTANTIATE_ACCESSORS_

// ---- autograd ---------------------------------------------------------------

bool Tensor::requires_grad() const {
  const TensorImpl* t = checked();
  return t->grad_fn != nullptr || t->requires_grad;
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  MINIDL_CHECK(is_leaf() || requires_grad,
               "you can only change requires_grad flags of leaf variables. If you want to use a "
               "computed variable in a subgraph that doesn't require differentiation use "
               "var_no_grad = var.detach().");
  MINIDL_CHECK(!requires_grad || is_floating(dtype()),
               "only Tensors of floating point dtype can require gradients, got ", dtype_name(dtype()));
  checked()->requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const {
  const TensorImpl* t = checked();
  return t->grad ? Tensor(t->grad) : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  if (g.defined()) {
    MINIDL_CHECK(g.shape() == shape() && g.dtype() == dtype() && g.device() == device(),
                 "assigned grad has data of a different type or size: expected ", dtype_name(dtype()),
                 " ", shape_str(shape()), " on ", device(), ", got ", dtype_name(g.dtype()), " ",
                 shape_str(g.shape()), " on ", g.device());
  }
  checked()->grad = g.impl_ptr();
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph);
}

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  MINIDL_CHECK(base.defined(), "make_view: the base tensor is undefined");
  // Every view (view, reshape, expand, permute, narrow...) comes through here:
  // refuse a geometry whose element count is negative or wraps around.
  const std::optional<int64_t> numel = checked_numel(shape);
  MINIDL_CHECK(numel.has_value(), "numel: integer multiplication overflow (or a negative size) ", "for sizes ",
               shape_str(shape));
  MINIDL_CHECK(strides.size() == shape.size(), "mismatch in length of strides and shape");
  for (const int64_t s : strides)
    MINIDL_CHECK(s >= 0, "as_strided: Negative strides are not supported at the moment, got strides: ",
                 shape_str(strides));
  MINIDL_CHECK(offset >= 0, "as_strided: Negative storage offset ", offset, " is not supported");
  if (*numel > 0) {  // every element it reaches lies in the storage (PyTorch's setStorage check)
    const auto item = static_cast<int64_t>(element_size(base.dtype()));
    int64_t last = offset;
    bool overflow = false;
    for (size_t i = 0; i < shape.size(); ++i) {
      int64_t reach = 0;
      overflow = overflow || __builtin_mul_overflow(shape[i] - 1, strides[i], &reach) ||
                 __builtin_add_overflow(last, reach, &last);
    }
    int64_t count = 0, required = 0;
    overflow = overflow || __builtin_add_overflow(last, 1, &count) || __builtin_mul_overflow(count, item, &required);
    const auto available = static_cast<int64_t>(base.impl()->storage->nbytes());
    const std::string needed = overflow ? std::string("more than 2^63 bytes") : std::to_string(required);
    MINIDL_CHECK(!overflow && required <= available, "setStorage: sizes ", shape_str(shape), ", strides ",
                 shape_str(strides), ", storage offset ", offset, ", and itemsize ", item,
                 " requiring a storage size of ", needed, " are out of bounds for storage of size ", available);
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->set_view(*base.impl(), std::move(shape), std::move(strides), offset);
  impl->is_view = true;
  return Tensor(std::move(impl));
}

Tensor Tensor::detach() const {
  Tensor d = make_view(*this, shape(), strides(), storage_offset());
  d.impl()->is_view = false;  // PyTorch's detach() shares the data but is not a view
  return d;
}

Tensor& Tensor::detach_() {
  TensorImpl* t = checked();
  // PyTorch's check and message (VariableTypeManual.cpp, detach_): a view's
  // autograd history is tied to its base's, so it cannot be cut in place.
  MINIDL_CHECK(!t->is_view,
               "Can't detach views in-place. Use detach() instead. If you are using DistributedDataParallel "
               "(DDP) for training, and gradient_as_bucket_view is set as True, gradients are views of DDP "
               "buckets, and hence detach_() cannot be called on these gradients. To fix this error, please "
               "refer to the Optimizer.zero_grad() function in torch/optim/optimizer.py as the solution.");
  t->grad_fn.reset();
  t->output_nr = 0;
  t->requires_grad = false;
  return *this;
}

HookId Tensor::register_hook(GradHook hook) const {
  MINIDL_CHECK(requires_grad(), "cannot register a hook on a tensor that doesn't require gradient");
  if (grad_fn()) return grad_fn()->add_pre_hook(output_nr(), std::move(hook));
  const HookId id = autograd::next_hook_id();
  checked()->hooks.push_back({id, std::move(hook)});
  return id;
}

HookId Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const {
  MINIDL_CHECK(is_leaf() && requires_grad(),
               "post accumulate grad hooks cannot be registered on non-leaf tensors");
  const HookId id = autograd::next_hook_id();
  checked()->post_accumulate_hooks.push_back({id, std::move(hook)});
  return id;
}

void Tensor::remove_hook(HookId id) const {
  TensorImpl* t = checked();
  auto drop = [id](auto& hooks) {
    return std::erase_if(hooks, [id](const auto& h) { return h.first == id; }) > 0;
  };
  if (drop(t->hooks) || drop(t->post_accumulate_hooks)) return;
  if (t->grad_fn && t->grad_fn->remove_pre_hook(id)) return;
  MINIDL_FAIL("remove_hook: no hook with id ", id, " on this tensor");
}

}  // namespace minidl
