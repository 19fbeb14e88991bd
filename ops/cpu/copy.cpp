// The CPU copy kernel (ops/copy.h's kernel interface): dst = src converted to
// dst's dtype, any strides on both sides. 16-bit floating types go through
// ops/cpu/convert_half.cpp's vectorized conversions; same-dtype copies of
// transposed views through ops/cpu/transpose_copy.cpp's tiles.
#include "minidl/ops/copy.h"
#include "minidl/ops/cpu/convert_half.h"
#include "minidl/ops/cpu/strided_loop.h"
#include "minidl/ops/cpu/transpose_copy.h"

namespace minidl {

namespace {

void copy_cpu(const Tensor& dst, const Tensor& src, bool /*non_blocking: a host copy is synchronous*/) {
  if (copy_transposed_cpu(dst, src)) return;
  if (is_reduced_floating(dst.dtype()) || is_reduced_floating(src.dtype())) return copy_half_cpu(dst, src);
  MINIDL_DISPATCH_ALL(dst.dtype(), "copy_", [&] {
    using D = scalar_t;
    MINIDL_DISPATCH_ALL(src.dtype(), "copy_", [&] {
      using S = scalar_t;
      copy_strided<D, S>(
          dst, src, [](const S* i, D* o, int64_t n) { for (int64_t k = 0; k < n; ++k) o[k] = static_cast<D>(i[k]); },
          [](S x) { return static_cast<D>(x); });
    });
  });
}

}  // namespace

void register_copy_cpu_kernels() { copy_stub.set(DeviceType::CPU, copy_cpu); }

}  // namespace minidl
