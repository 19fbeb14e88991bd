// CUDA kernels of ops/fused_optim.h's multi-tensor path (_fused_sgd_,
// _fused_adam_): all parameters of one dtype and device in a few launches
// (ops/cuda/multi_tensor_apply.cuh; at most 48 tensors per SGD launch, 30 per
// Adam launch, 320 chunks of 64Ki elements each), on the current stream of
// their device. The per-element math is ops/cuda/optim_math.h's; the
// functors, their scalars and the packing are ops/cuda/multi_tensor_math.h's,
// all run by the CPU tests (tests/test_cuda_multi_tensor_math.cpp).
// Elementwise, so deterministic. float16/bfloat16 computed in float, rounded
// once (Apex's O3). float32/float64/float16/bfloat16 checked against the CPU
// kernels on an H100 (tests/test_cuda_multi_tensor, 2026-11-27).
#include "minidl/ops/cuda/multi_tensor_apply.cuh"
#include "minidl/ops/fused_optim.h"

namespace minidl {

namespace {

using cuda_kernels::LaunchContext;

void sgd_multi_step_cuda(const MultiStepArgs<SgdStepArgs>& args) {
  check_multi_step(args, "_fused_sgd_");
  if (args.tensors.empty()) return;
  const Tensor& first = args.tensors.front().param;
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(first.dtype(), "_fused_sgd_", [&] {
    const LaunchContext ctx(first.device());
    if (args.tensors.front().lr_tensor.defined()) {  // capturable: the lr is read on the device
      cuda_kernels::multi_tensor_apply(ctx, cuda_math::sgd_capturable_lists<scalar_t>(args),
                                       cuda_math::make_sgd_capturable_op<scalar_t>(args.tensors.front()), "_fused_sgd_");
      return;
    }
    cuda_kernels::multi_tensor_apply(ctx, cuda_math::sgd_lists<scalar_t>(args),
                                     cuda_math::make_sgd_multi_op<scalar_t>(args.tensors.front()), "_fused_sgd_");
  });
}

void adam_multi_step_cuda(const MultiStepArgs<AdamStepArgs>& args) {
  check_multi_step(args, "_fused_adam_");
  if (args.tensors.empty()) return;
  const Tensor& first = args.tensors.front().param;
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(first.dtype(), "_fused_adam_", [&] {
    const LaunchContext ctx(first.device());
    if (args.tensors.front().lr_tensor.defined()) {
      // Capturable: the steps are counted on the device first (same stream,
      // so the update sees them), then lr and steps are read there.
      cuda_kernels::multi_tensor_apply(ctx, cuda_math::step_increment_lists(args), cuda_math::StepIncrementOp{},
                                       "_fused_adam_ (step += 1)");
      cuda_kernels::multi_tensor_apply(ctx, cuda_math::adam_capturable_lists<scalar_t>(args),
                                       cuda_math::make_adam_capturable_op<scalar_t>(args.tensors.front()),
                                       "_fused_adam_");
      return;
    }
    cuda_kernels::multi_tensor_apply(ctx, cuda_math::adam_lists<scalar_t>(args),
                                     cuda_math::make_adam_multi_op<scalar_t>(args.tensors.front()), "_fused_adam_");
  });
}

}  // namespace

void register_fused_optim_multi_cuda_kernels() {
  sgd_multi_step_stub.set(DeviceType::CUDA, sgd_multi_step_cuda);
  adam_multi_step_stub.set(DeviceType::CUDA, adam_multi_step_cuda);
}

}  // namespace minidl
