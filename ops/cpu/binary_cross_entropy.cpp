// CPU kernels of binary_cross_entropy(_with_logits) (ops/binary_cross_entropy.h):
// each one Eigen array expression over contiguous tensors (array_loop:
// vectorized exp/log/log1p, ops/cpu/array_math.h), in the tensor's own
// precision, parallel when large; each element is independent and the chunks
// fixed, so results do not depend on the thread count.
// GCC 12 reports its own _mm512_undefined_* inside the AVX-512 intrinsics
// Eigen's packet math inlines as (maybe) uninitialized (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <Eigen/Core>

#include "minidl/ops/binary_cross_entropy.h"
#include "minidl/ops/cpu/array_loop.h"
#include "minidl/ops/cpu/array_math.h"
#include "minidl/ops/cpu/float32_compute.h"

namespace minidl {

namespace {

template <class T>
void bce_forward_kernel(const Tensor& x, const Tensor& t, const Tensor& out) {
  // Checked before the parallel loop (no throwing inside it); NaN fails both comparisons.
  const Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> xs(x.data_ptr<T>(), x.numel());
  MINIDL_CHECK(((xs >= T(0)) && (xs <= T(1))).all(),
               "binary_cross_entropy: all elements of input should be between 0 and 1");
  array_loop<T>(
      out,
      [](const auto& xv, const auto& tv) {
        const auto log_x = vec::log(xv).max(T(-100));  // two declarations: the types differ
        const auto log_1mx = (-xv).log1p().max(T(-100));
        return -(tv * log_x + (T(1) - tv) * log_1mx);
      },
      x, t);
}

template <class T>
void bce_backward_kernel(const Tensor& g, const Tensor& x, const Tensor& t, const Tensor& gx, const Tensor& gt) {
  if (gx.defined())
    array_loop<T>(
        gx,
        [](const auto& gv, const auto& xv, const auto& tv) {
          return gv * (xv - tv) / ((T(1) - xv) * xv).max(T(1e-12));
        },
        g, x, t);
  if (gt.defined())
    array_loop<T>(gt, [](const auto& gv, const auto& xv) { return gv * ((-xv).log1p() - vec::log(xv)); }, g, x);
}

template <class T>
void bce_logits_forward_kernel(const Tensor& x, const Tensor& t, const Tensor& pw, const Tensor& out) {
  if (!pw.defined())
    return array_loop<T>(
        out, [](const auto& xv, const auto& tv) { return (T(1) - tv) * xv - vec::log_sigmoid(xv); }, x, t);
  array_loop<T>(
      out,
      [](const auto& xv, const auto& tv, const auto& p) {
        return (T(1) - tv) * xv - (T(1) + (p - T(1)) * tv) * vec::log_sigmoid(xv);
      },
      x, t, pw);
}

template <class T>
void bce_logits_backward_kernel(const Tensor& g, const Tensor& x, const Tensor& t, const Tensor& pw, const Tensor& gx,
                                const Tensor& gt) {
  if (!pw.defined()) {
    if (gx.defined())
      array_loop<T>(
          gx, [](const auto& gv, const auto& xv, const auto& tv) { return gv * (vec::sigmoid(xv) - tv); }, g, x, t);
    if (gt.defined()) array_loop<T>(gt, [](const auto& gv, const auto& xv) { return -gv * xv; }, g, x);
    return;
  }
  if (gx.defined())
    array_loop<T>(
        gx,
        [](const auto& gv, const auto& xv, const auto& tv, const auto& p) {
          return gv * ((T(1) + (p - T(1)) * tv) * vec::sigmoid(xv) - p * tv);
        },
        g, x, t, pw);
  if (gt.defined())
    array_loop<T>(
        gt,
        [](const auto& gv, const auto& xv, const auto& p) {
          return gv * (vec::log_sigmoid(-xv) - p * vec::log_sigmoid(xv));
        },
        g, x, pw);
}

void bce_forward_cpu(const Tensor& x, const Tensor& t, const Tensor& out) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "binary_cross_entropy", [&] { bce_forward_kernel<scalar_t>(x, t, out); });
}

void bce_backward_cpu(const Tensor& g, const Tensor& x, const Tensor& t, const Tensor& gx, const Tensor& gt) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "binary_cross_entropy_backward",
                           [&] { bce_backward_kernel<scalar_t>(g, x, t, gx, gt); });
}

void bce_logits_forward_cpu(const Tensor& x, const Tensor& t, const Tensor& pw, const Tensor& out) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "binary_cross_entropy_with_logits",
                           [&] { bce_logits_forward_kernel<scalar_t>(x, t, pw, out); });
}

void bce_logits_backward_cpu(const Tensor& g, const Tensor& x, const Tensor& t, const Tensor& pw, const Tensor& gx,
                             const Tensor& gt) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "binary_cross_entropy_with_logits_backward",
                           [&] { bce_logits_backward_kernel<scalar_t>(g, x, t, pw, gx, gt); });
}

}  // namespace

void register_bce_cpu_kernels() {
  bce_forward_stub.set(DeviceType::CPU, cpu::Float32Compute<bce_forward_cpu, 2>::run);
  bce_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<bce_backward_cpu, 3, 4>::run);
  bce_logits_forward_stub.set(DeviceType::CPU, cpu::Float32Compute<bce_logits_forward_cpu, 3>::run);
  bce_logits_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<bce_logits_backward_cpu, 4, 5>::run);
}

}  // namespace minidl
