// conv2d's CPU kernels as the op sees them (ops/conv2d.h's kernel interface):
// Tensor arguments unpacked onto the raw-pointer kernels of
// ops/cpu/conv2d_kernels.h; bfloat16 on the dot-product GEMM of
// ops/cpu/bf16_kernels.h where the CPU has it (but for the convs that
// float32 runs by Winograd F(4x4): see winograd4_in_float32), else through
// Float32Compute.
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

// Whether a bfloat16 conv runs float32's Winograd F(4x4) on widened operands
// instead of the dot products: F(4x4) does 4x fewer products, the dot
// products run at most twice float32's rate (on Zen 4's 256-bit units about
// that). So where conv2d_pick_algo takes F(4x4) on maps of more than one 4x4
// tile; a single-tile 4x4 map lost. Zen 4, 1 thread, ResNet-18's 3x3 convs
// under bfloat16 autocast, fwd+bwd ms: 64 at 32x32 86 -> 81, 128 at 16x16
// 78 -> 66, 256 at 8x8 80 -> 61, 512 at 4x4 84 -> 91 (so excluded); the
// b64 step at 2 threads 705 -> 658-685 ms, peak RSS 487 -> 577 MiB (the
// float32 copies). Without AVX512-BF16 every bfloat16 conv is float32 anyway.
bool winograd4_in_float32(const Conv2dGeometry& g) {
  return conv2d_pick_algo(g) == Conv2dAlgo::kWinograd4 && (g.out_h > 4 || g.out_w > 4);
}

void conv2d_forward_any(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                        const Tensor& y) {
  if (cpu::bf16_dot_applies({&x, &w, &bias, &y}) && !winograd4_in_float32(g))
    return cpu::conv2d_forward_bf16(g, x, w, bias, y);
  cpu::Float32Compute<conv2d_forward_cpu, 4>::run(g, x, w, bias, y);
}

void conv2d_backward_any(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                         const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  if (cpu::bf16_dot_applies({&x, &w, &dy, &dx, &dw, &dbias}) && !winograd4_in_float32(g))
    return cpu::conv2d_backward_bf16(g, x, w, dy, dx, dw, dbias);
  cpu::Float32Compute<conv2d_backward_cpu, 4, 5, 6>::run(g, x, w, dy, dx, dw, dbias);
}

}  // namespace

void register_conv2d_cpu_kernels() {
  // These kernels compute NCHW; a channels-last call goes through NCHW copies
  // (correct, not fast: channels-last is for the CUDA kernels).
  conv2d_forward_stub.set(DeviceType::CPU, conv2d_forward_through_nchw<conv2d_forward_any>);
  conv2d_backward_stub.set(DeviceType::CPU, conv2d_backward_through_nchw<conv2d_backward_any>);
}

}  // namespace minidl
