#include "minidl/core/memory_format.h"

#include <algorithm>
#include <numeric>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/tensor.h"

namespace minidl {

const char* memory_format_name(MemoryFormat fmt) {
  switch (fmt) {
    case MemoryFormat::Contiguous: return "torch.contiguous_format";
    case MemoryFormat::ChannelsLast: return "torch.channels_last";
    case MemoryFormat::Preserve: return "torch.preserve_format";
  }
  return "?";
}

Shape channels_last_strides(const Shape& shape) {
  MINIDL_CHECK(shape.size() == 4, "required rank 4 tensor to use channels_last format, got a tensor of size ",
               shape_str(shape));
  const int64_t C = shape[1], H = shape[2], W = shape[3];
  return {H * W * C, 1, W * C, C};
}

bool strides_match(const Shape& shape, const Shape& strides, MemoryFormat fmt) {
  MINIDL_ASSERT(fmt != MemoryFormat::Preserve);
  if (fmt == MemoryFormat::ChannelsLast && shape.size() != 4) return false;
  if (checked_numel(shape).value_or(1) == 0) return true;  // no element to misplace
  const Shape expected = fmt == MemoryFormat::ChannelsLast ? channels_last_strides(shape) : contiguous_strides(shape);
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1 && strides[d] != expected[d]) return false;
  return true;
}

// PyTorch's is_channels_last_strides_2d_s4 (c10/core/MemoryFormat.h): the
// strides ordered C < W < H < N, with its tie rules for dims of size 1, so
// that ambiguous tensors (N111, N1H1 contiguous) count as NCHW.
bool has_channels_last_strides(const Shape& sizes, const Shape& strides) {
  if (sizes.size() != 4 || strides[1] == 0) return false;
  int64_t min = 0;
  for (int d : {1, 3, 2, 0}) {
    if (sizes[d] == 0 || strides[d] < min) return false;
    if (d == 0 && min == strides[1]) return false;
    min = strides[d];
    if (sizes[d] > 1) min *= sizes[d];
  }
  return true;
}

std::optional<Shape> dense_dim_order(const Tensor& t) {
  Shape order(static_cast<size_t>(t.dim()));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (t.is_contiguous()) return order;
  const Shape& strides = t.strides();
  const Shape& shape = t.shape();
  // Dims of size 1 go innermost: their stride says nothing about the layout.
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const bool a1 = shape[a] == 1, b1 = shape[b] == 1;
    if (a1 != b1) return b1;
    return strides[a] > strides[b];
  });
  Shape permuted_shape, permuted_strides;
  for (int64_t d : order) {
    permuted_shape.push_back(shape[d]);
    permuted_strides.push_back(strides[d]);
  }
  if (!strides_match(permuted_shape, permuted_strides, MemoryFormat::Contiguous)) return std::nullopt;
  return order;
}

bool is_non_overlapping_and_dense(const Tensor& t) { return dense_dim_order(t).has_value(); }

bool same_dense_layout(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || !is_non_overlapping_and_dense(a) || !is_non_overlapping_and_dense(b)) return false;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) > 1 && a.strides()[d] != b.strides()[d]) return false;
  return true;
}

Tensor to_layout_of(const Tensor& t, const Tensor& like) {
  if (same_dense_layout(t, like)) return t;
  NoGradGuard no_grad;
  Tensor out = empty_strided(like.shape(), like.strides(), t.options());
  out.copy_(t);
  return out;
}

MemoryFormat result_format(const Shape& shape, std::initializer_list<Tensor> inputs) {
  for (const Tensor& t : inputs)
    if (t.defined() && t.shape() == shape && t.suggest_memory_format() == MemoryFormat::ChannelsLast)
      return MemoryFormat::ChannelsLast;
  return MemoryFormat::Contiguous;
}

std::vector<Tensor> in_memory_order(const Tensor& out, const std::vector<Tensor>& operands) {
  std::vector<Tensor> views{out};
  views.insert(views.end(), operands.begin(), operands.end());
  if (out.is_contiguous()) return views;
  const std::optional<Shape> order = dense_dim_order(out);
  MINIDL_ASSERT(order.has_value());
  for (Tensor& v : views) {
    MINIDL_ASSERT(v.shape() == out.shape());
    Shape shape, strides;
    for (int64_t d : *order) {
      shape.push_back(v.shape()[d]);
      strides.push_back(v.strides()[d]);
    }
    v = make_view(v, std::move(shape), std::move(strides), v.storage_offset());
  }
  return views;
}

}  // namespace minidl
