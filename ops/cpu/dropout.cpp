// CPU kernels of dropout (ops/dropout.h's kernel interface): the mask is
// drawn serially from the generator, then applied in parallel.
#include "minidl/core/generator.h"
#include "minidl/ops/cpu/float32_compute.h"
#include "minidl/ops/dropout.h"

namespace minidl {

namespace {

// Draws the mask serially (the generator is a sequential stream) and applies
// it in parallel.
template <class T>
void dropout_forward_kernel(const T* x, T* y, T* mask, int64_t n, double p, Generator& gen) {
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  for (int64_t i = 0; i < n; ++i) mask[i] = gen.uniform() >= p ? scale : T(0);
#pragma omp parallel for schedule(static) if (n >= 32768)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * mask[i];
}

template <class T>
void mul_kernel(const T* a, const T* b, T* out, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= 32768)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

void dropout_forward_cpu(const Tensor& x, const Tensor& y, const Tensor& mask, double p, Generator& gen) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "dropout", [&] {
    dropout_forward_kernel(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), mask.data_ptr<scalar_t>(), x.numel(), p,
                           gen);
  });
}

void dropout_backward_cpu(const Tensor& grad_y, const Tensor& mask, const Tensor& grad_x) {
  MINIDL_DISPATCH_FLOATING(mask.dtype(), "dropout_backward", [&] {
    mul_kernel(grad_y.data_ptr<scalar_t>(), mask.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(), mask.numel());
  });
}

}  // namespace

void register_dropout_cpu_kernels() {
  dropout_forward_stub.set(DeviceType::CPU, cpu::Float32Compute<dropout_forward_cpu, 1, 2>::run);
  dropout_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<dropout_backward_cpu, 2>::run);
}

}  // namespace minidl
