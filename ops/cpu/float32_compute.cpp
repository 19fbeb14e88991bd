// The conversions behind Float32Compute (ops/cpu/float32_compute.h).
#include "minidl/ops/cpu/float32_compute.h"

#include "minidl/core/storage.h"
#include "minidl/ops/copy.h"

namespace minidl::cpu {

bool is_reduced_tensor(const Tensor& t) { return t.defined() && is_reduced_floating(t.dtype()); }

Tensor widen_to_float32(const Tensor& t) {
  const int64_t n = static_cast<int64_t>(t.impl()->storage->nbytes() / element_size(t.dtype()));
  const Tensor whole = make_view(t, {n}, {1}, 0);
  Tensor wide = empty({n}, TensorOptions(kFloat32).device(t.device()));
  copy_stub.kernel(t.device())(wide, whole);
  return make_view(wide, t.shape(), t.strides(), t.storage_offset());
}

void round_into(const Tensor& dst, const Tensor& wide) { copy_stub.kernel(dst.device())(dst, wide); }

}  // namespace minidl::cpu
