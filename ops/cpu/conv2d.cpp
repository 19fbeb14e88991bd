// conv2d's CPU kernels as the op sees them (ops/conv2d.h's kernel interface):
// Tensor arguments unpacked onto the raw-pointer kernels of
// ops/cpu/conv2d_kernels.h; bfloat16 on the dot-product GEMM of
// ops/cpu/bf16_kernels.h where the CPU has it (but for the convs that
// float32 runs by Winograd F(4x4): see winograd4_in_float32); 16-bit passes
// that take Winograd read and write their 16-bit tensors directly (computed
// in float32, each output rounded once); the rest through Float32Compute.
#include <atomic>
#include <initializer_list>

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

// Whether a bfloat16 conv runs Winograd F(4x4) in float32 (reading the
// bfloat16 tensors directly: reduced_winograd_tile) instead of the dot
// products: F(4x4) does 4x fewer products, the dot products run at most
// twice float32's rate (on Zen 4's 256-bit units about that). So where
// conv2d_pick_algo takes F(4x4) on maps of more than one 4x4 tile; a
// single-tile 4x4 map lost. Zen 4, 1 thread, ResNet-18's 3x3 convs
// under bfloat16 autocast, fwd+bwd ms: 64 at 32x32 86 -> 81, 128 at 16x16
// 78 -> 66, 256 at 8x8 80 -> 61, 512 at 4x4 84 -> 91 (so excluded); the
// b64 step at 2 threads 705 -> 658-685 ms, peak RSS 487 -> 577 MiB (the
// float32 copies of that time; without them, 603 -> 589 ms, 572 -> 501 MiB).
// Without AVX512-BF16 every bfloat16 conv is float32 anyway.
bool winograd4_in_float32(const Conv2dGeometry& g) {
  return conv2d_pick_algo(g) == Conv2dAlgo::kWinograd4 && (g.out_h > 4 || g.out_w > 4);
}

// The Winograd tile of a 16-bit pass that runs Winograd on its tensors as
// they are (ops/cpu/conv2d_winograd.cpp: the bits of Float32Compute's path,
// without widening the operands into float32 copies and rounding the results
// in passes of their own); 0 where the pass takes another path or the
// tensors are not all of one 16-bit type in CPU memory.
int reduced_winograd_tile(const Conv2dGeometry& g, Conv2dPass pass, std::initializer_list<const Tensor*> tensors) {
  if (!cpu::same_reduced_on_cpu(tensors)) return 0;
  switch (conv2d_resolve_algo(g, pass)) {
    case Conv2dAlgo::kWinograd: return 2;
    case Conv2dAlgo::kWinograd4: return 4;
    default: return 0;
  }
}

std::atomic<int64_t> reduced_winograd_passes{0};

void conv2d_forward_any(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                        const Tensor& y) {
  if (cpu::bf16_dot_applies({&x, &w, &bias, &y}) && !winograd4_in_float32(g))
    return cpu::conv2d_forward_bf16(g, x, w, bias, y);
  if (const int tile = reduced_winograd_tile(g, Conv2dPass::kForward, {&x, &w, &bias, &y})) {
    ++reduced_winograd_passes;
    bool done = false;  // not when x holds an inf or NaN: then the float32 path below (direct)
    cpu::dispatch_reduced(x.dtype(), [&](auto s) {
      using S = decltype(s);
      done = conv2d_winograd_forward(g, x.data_ptr<S>(), w.data_ptr<S>(), ptr_or_null<S>(bias), y.data_ptr<S>(), tile);
    });
    if (done) return;
  }
  cpu::Float32Compute<conv2d_forward_cpu, 4>::run(g, x, w, bias, y);
}

void conv2d_backward_any(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                         const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  if (cpu::bf16_dot_applies({&x, &w, &dy, &dx, &dw, &dbias}) && !winograd4_in_float32(g))
    return cpu::conv2d_backward_bf16(g, x, w, dy, dx, dw, dbias);
  const int input_tile = dx.defined() ? reduced_winograd_tile(g, Conv2dPass::kInput, {&dy, &w, &dx}) : 0;
  const int weight_tile = dw.defined() ? reduced_winograd_tile(g, Conv2dPass::kWeight, {&dy, &x, &dw}) : 0;
  reduced_winograd_passes += (input_tile > 0) + (weight_tile > 0);
  bool input_done = false;  // not when dy holds an inf or NaN: then the float32 path below (direct)
  if (input_tile || weight_tile)
    cpu::dispatch_reduced(dy.dtype(), [&](auto s) {
      using S = decltype(s);
      const S* pdy = dy.data_ptr<S>();
      if (input_tile)
        input_done = conv2d_winograd_backward_input(g, pdy, w.data_ptr<S>(), dx.data_ptr<S>(), input_tile);
      if (weight_tile) conv2d_winograd_backward_weight(g, pdy, x.data_ptr<S>(), dw.data_ptr<S>(), weight_tile);
    });
  // The passes left (and the bias gradient), with only the operands they read.
  const Tensor none;
  const bool rest_input = dx.defined() && !input_done, rest_weight = dw.defined() && !weight_tile;
  if (rest_input || rest_weight || dbias.defined())
    cpu::Float32Compute<conv2d_backward_cpu, 4, 5, 6>::run(g, rest_weight ? x : none, rest_input ? w : none, dy,
                                                           rest_input ? dx : none, rest_weight ? dw : none, dbias);
}

}  // namespace

int64_t conv2d_reduced_winograd_passes() { return reduced_winograd_passes.load(); }

void register_conv2d_cpu_kernels() {
  // These kernels compute NCHW; a channels-last call goes through NCHW copies
  // (correct, not fast: channels-last is for the CUDA kernels).
  conv2d_forward_stub.set(DeviceType::CPU, conv2d_forward_through_nchw<conv2d_forward_any>);
  conv2d_backward_stub.set(DeviceType::CPU, conv2d_backward_through_nchw<conv2d_backward_any>);
}

}  // namespace minidl
