// CPU kernels of binary_cross_entropy(_with_logits) (ops/binary_cross_entropy.h):
// one elementwise loop over contiguous tensors, in the tensor's own precision,
// parallel when large (each element is independent, so results do not depend
// on the thread count).
#include <algorithm>
#include <cmath>

#include "minidl/ops/binary_cross_entropy.h"
#include "minidl/ops/cpu/float32_compute.h"

namespace minidl {

namespace {

constexpr int64_t kParallelWork = 32768;

template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|)): exp never overflows.
template <class T>
inline T log_sigmoid(T x) {
  return std::min(x, T(0)) - std::log1p(std::exp(-std::abs(x)));
}

template <class T>
inline T sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

template <class T>
void bce_forward_kernel(const T* x, const T* t, T* out, int64_t n) {
  // Checked before the parallel loop (no throwing inside it); !(x >= 0) also catches NaN.
  for (int64_t i = 0; i < n; ++i)
    MINIDL_CHECK(x[i] >= T(0) && x[i] <= T(1), "binary_cross_entropy: all elements of input should be between 0 and 1");
  const T floor = T(-100);
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const T log_x = std::max(std::log(x[i]), floor);
    const T log_1mx = std::max(std::log1p(-x[i]), floor);
    out[i] = -(t[i] * log_x + (T(1) - t[i]) * log_1mx);
  }
}

template <class T>
void bce_backward_kernel(const T* g, const T* x, const T* t, T* gx, T* gt, int64_t n) {
  const T kEpsilon = T(1e-12);
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    if (gx) gx[i] = g[i] * (x[i] - t[i]) / std::max((T(1) - x[i]) * x[i], kEpsilon);
    if (gt) gt[i] = g[i] * (std::log1p(-x[i]) - std::log(x[i]));
  }
}

template <class T>
void bce_logits_forward_kernel(const T* x, const T* t, const T* pw, T* out, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const T l = pw ? T(1) + (pw[i] - T(1)) * t[i] : T(1);
    out[i] = (T(1) - t[i]) * x[i] - l * log_sigmoid(x[i]);
  }
}

template <class T>
void bce_logits_backward_kernel(const T* g, const T* x, const T* t, const T* pw, T* gx, T* gt, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const T p = pw ? pw[i] : T(1);
    if (gx) gx[i] = g[i] * ((T(1) + (p - T(1)) * t[i]) * sigmoid(x[i]) - p * t[i]);
    if (gt) gt[i] = g[i] * (pw ? log_sigmoid(-x[i]) - p * log_sigmoid(x[i]) : -x[i]);
  }
}

void bce_forward_cpu(const Tensor& x, const Tensor& t, const Tensor& out) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "binary_cross_entropy", [&] {
    bce_forward_kernel(x.data_ptr<scalar_t>(), t.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), x.numel());
  });
}

void bce_backward_cpu(const Tensor& g, const Tensor& x, const Tensor& t, const Tensor& gx, const Tensor& gt) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "binary_cross_entropy_backward", [&] {
    bce_backward_kernel(g.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), t.data_ptr<scalar_t>(),
                        data_or_null<scalar_t>(gx), data_or_null<scalar_t>(gt), x.numel());
  });
}

void bce_logits_forward_cpu(const Tensor& x, const Tensor& t, const Tensor& pw, const Tensor& out) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "binary_cross_entropy_with_logits", [&] {
    bce_logits_forward_kernel(x.data_ptr<scalar_t>(), t.data_ptr<scalar_t>(), data_or_null<scalar_t>(pw),
                              out.data_ptr<scalar_t>(), x.numel());
  });
}

void bce_logits_backward_cpu(const Tensor& g, const Tensor& x, const Tensor& t, const Tensor& pw, const Tensor& gx,
                             const Tensor& gt) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "binary_cross_entropy_with_logits_backward", [&] {
    bce_logits_backward_kernel(g.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), t.data_ptr<scalar_t>(),
                               data_or_null<scalar_t>(pw), data_or_null<scalar_t>(gx), data_or_null<scalar_t>(gt),
                               x.numel());
  });
}

}  // namespace

void register_bce_cpu_kernels() {
  bce_forward_stub.set(DeviceType::CPU, cpu::Float32Compute<bce_forward_cpu, 2>::run);
  bce_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<bce_backward_cpu, 3, 4>::run);
  bce_logits_forward_stub.set(DeviceType::CPU, cpu::Float32Compute<bce_logits_forward_cpu, 3>::run);
  bce_logits_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<bce_logits_backward_cpu, 4, 5>::run);
}

}  // namespace minidl
