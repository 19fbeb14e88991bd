// The conversions behind Float32Compute (ops/cpu/float32_compute.h).
#include "minidl/ops/cpu/float32_compute.h"

#include "minidl/ops/copy.h"

namespace minidl::cpu {

bool is_reduced_tensor(const Tensor& t) { return t.defined() && is_reduced_floating(t.dtype()); }

bool same_reduced_on_cpu(std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = *tensors.begin();
  if (!is_reduced_tensor(*first)) return false;
  for (const Tensor* t : tensors)
    if (t->defined() && (t->dtype() != first->dtype() || !(t->device().is_cpu() || t->device().is_test()))) return false;
  return true;
}

// Converts only the span of storage the view reaches (from its first element
// to its last, strides being non-negative), so a small view of a big tensor
// costs its own size; inside that span the float32 copy keeps the strides.
Tensor widen_to_float32(const Tensor& t) {
  int64_t span = t.numel() == 0 ? 0 : 1;
  for (int64_t d = 0; d < t.dim() && span > 0; ++d) {
    MINIDL_ASSERT(t.stride(d) >= 0);
    span += (t.size(d) - 1) * t.stride(d);
  }
  const Tensor source = make_view(t, {span}, {1}, t.storage_offset());
  Tensor wide = empty({span}, TensorOptions(kFloat32).device(t.device()));
  copy_stub.kernel(t.device())(wide, source, /*non_blocking=*/false);
  return make_view(wide, t.shape(), t.strides(), 0);
}

void round_into(const Tensor& dst, const Tensor& wide) { copy_stub.kernel(dst.device())(dst, wide, /*non_blocking=*/false); }

}  // namespace minidl::cpu
