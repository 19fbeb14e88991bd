// The state behind a Tensor handle: a view (offset, shape, strides) into a
// shared Storage, plus what autograd needs. Users go through Tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "minidl/core/dtype.h"
#include "minidl/core/shape.h"
#include "minidl/core/storage.h"

namespace minidl {

class Tensor;
namespace autograd {
class Node;
}

using GradHook = std::function<Tensor(const Tensor&)>;  // may return a replacement grad
using PostAccumulateGradHook = std::function<void(Tensor&)>;
using HookId = int64_t;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;  // in elements
  DType dtype = DType::Float32;

  // Autograd. A leaf has no grad_fn; requires_grad is meaningful only for
  // leaves (a non-leaf requires grad iff it has a grad_fn).
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;
  uint32_t output_nr = 0;
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves only, made lazily
  std::vector<std::pair<HookId, GradHook>> hooks;  // leaves; non-leaf hooks live on grad_fn
  std::vector<std::pair<HookId, PostAccumulateGradHook>> post_accumulate_hooks;
  // Made by a view op (make_view: view, reshape, narrow, select, expand, ...),
  // PyTorch's is_view(); detach() and Module::to's re-pointing are not views.
  // detach_() refuses views, as PyTorch does.
  bool is_view = false;

  // Points this impl at base's data with the given geometry: the storage and
  // dtype come from base, autograd state is left as it is. Every path that makes
  // or re-points a view goes through here (make_view, detach, Module::to), so a
  // new field that says where or what the data is (a stream, a pinned flag) is
  // one edit.
  void set_view(const TensorImpl& base, Shape new_shape, Shape new_strides, int64_t new_offset) {
    storage = base.storage;
    dtype = base.dtype;
    offset = new_offset;
    shape = std::move(new_shape);
    strides = std::move(new_strides);
  }

  Device device() const { return storage->device(); }
  int64_t numel() const { return numel_of(shape); }
  void* data() const {
    return static_cast<char*>(storage->data()) + offset * static_cast<int64_t>(element_size(dtype));
  }
};

}  // namespace minidl
