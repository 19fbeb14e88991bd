// conv2d's CPU kernels as the op sees them (ops/conv2d.h's kernel interface):
// Tensor arguments unpacked onto the raw-pointer kernels of
// ops/cpu/conv2d_kernels.h; bfloat16 on the dot-product GEMM of
// ops/cpu/bf16_kernels.h where the CPU has it, else through Float32Compute.
#include "minidl/ops/conv2d.h"
#include "minidl/ops/cpu/bf16_kernels.h"
#include "minidl/ops/cpu/conv2d_kernels.h"
#include "minidl/ops/cpu/float32_compute.h"

namespace minidl {

namespace {

template <class T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

void conv2d_forward_cpu(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                        const Tensor& y) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "conv2d", [&] {
    conv2d_forward_kernel<scalar_t>(g, x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), ptr_or_null<scalar_t>(bias),
                                    y.data_ptr<scalar_t>());
  });
}

void conv2d_backward_cpu(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                         const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  MINIDL_DISPATCH_FLOATING(dy.dtype(), "conv2d_backward", [&] {
    if (dx.defined())
      conv2d_backward_input_kernel<scalar_t>(g, dy.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(),
                                             dx.data_ptr<scalar_t>());
    if (dw.defined() || dbias.defined())
      conv2d_backward_weight_kernel<scalar_t>(g, dy.data_ptr<scalar_t>(), ptr_or_null<scalar_t>(x),
                                              ptr_or_null<scalar_t>(dw), ptr_or_null<scalar_t>(dbias));
  });
}

void conv2d_forward_any(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                        const Tensor& y) {
  if (cpu::bf16_dot_applies({&x, &w, &bias, &y})) return cpu::conv2d_forward_bf16(g, x, w, bias, y);
  cpu::Float32Compute<conv2d_forward_cpu, 4>::run(g, x, w, bias, y);
}

void conv2d_backward_any(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                         const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  if (cpu::bf16_dot_applies({&x, &w, &dy, &dx, &dw, &dbias})) return cpu::conv2d_backward_bf16(g, x, w, dy, dx, dw, dbias);
  cpu::Float32Compute<conv2d_backward_cpu, 4, 5, 6>::run(g, x, w, dy, dx, dw, dbias);
}

}  // namespace

void register_conv2d_cpu_kernels() {
  conv2d_forward_stub.set(DeviceType::CPU, conv2d_forward_any);
  conv2d_backward_stub.set(DeviceType::CPU, conv2d_backward_any);
}

}  // namespace minidl
