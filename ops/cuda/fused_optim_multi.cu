// CUDA kernels of ops/fused_optim.h's multi-tensor path (_fused_sgd_,
// _fused_adam_): all parameters of one dtype and device in a few launches
// (ops/cuda/multi_tensor_apply.cuh; at most 48 tensors per SGD launch, 30 per
// Adam launch, 320 chunks of 64Ki elements each), on the current stream of
// their device. The per-element math is ops/cuda/optim_math.h's, the
// functors ops/cuda/multi_tensor_math.h's, both run by the CPU tests.
// Elementwise, so deterministic. Compiled, not run on a GPU.
#include "minidl/ops/cuda/multi_tensor_apply.cuh"
#include "minidl/ops/fused_optim.h"

namespace minidl {

namespace {

using cuda_kernels::LaunchContext;

void sgd_multi_step_cuda(const MultiStepArgs<SgdStepArgs>& args) {
  check_multi_step(args, "_fused_sgd_");
  if (args.tensors.empty()) return;
  const SgdStepArgs& h = args.tensors.front();
  MINIDL_CUDA_DISPATCH_FLOATING(h.param.dtype(), "_fused_sgd_", [&] {
    using T = scalar_t;
    using Op = cuda_math::SgdMultiOp<T>;
    const LaunchContext ctx(h.param.device());
    const bool has_buf = h.momentum_buffer.defined();
    const Op op{{static_cast<T>(h.weight_decay), static_cast<T>(h.momentum), static_cast<T>(1.0 - h.dampening),
                 static_cast<T>(-h.lr), h.weight_decay != 0.0, h.nesterov, false, has_buf}};
    std::vector<std::array<void*, Op::kDepth>> ptrs;
    std::vector<int64_t> numels;
    std::vector<typename Op::Extra> first;
    for (const SgdStepArgs& a : args.tensors) {
      ptrs.push_back({a.param.data_ptr<T>(), a.grad.data_ptr<T>(),
                      has_buf ? a.momentum_buffer.data_ptr<T>() : nullptr});
      numels.push_back(a.param.numel());
      first.push_back(a.first_step);
    }
    cuda_kernels::multi_tensor_apply(ctx, ptrs, numels, first, op, "_fused_sgd_");
  });
}

void adam_multi_step_cuda(const MultiStepArgs<AdamStepArgs>& args) {
  check_multi_step(args, "_fused_adam_");
  if (args.tensors.empty()) return;
  const AdamStepArgs& h = args.tensors.front();
  MINIDL_CUDA_DISPATCH_FLOATING(h.param.dtype(), "_fused_adam_", [&] {
    using T = scalar_t;
    using Op = cuda_math::AdamMultiOp<T>;
    const LaunchContext ctx(h.param.device());
    const bool ams = h.max_exp_avg_sq.defined();
    const Op op{{static_cast<T>(h.weight_decay), static_cast<T>(1.0 - h.lr * h.weight_decay),
                 static_cast<T>(1.0 - h.beta1), static_cast<T>(h.beta2), static_cast<T>(1.0 - h.beta2), T(1),
                 static_cast<T>(h.eps), T(0), h.weight_decay != 0.0, h.decoupled_weight_decay, ams}};
    std::vector<std::array<void*, Op::kDepth>> ptrs;
    std::vector<int64_t> numels;
    std::vector<typename Op::Extra> extras;
    for (const AdamStepArgs& a : args.tensors) {
      ptrs.push_back({a.param.data_ptr<T>(), a.grad.data_ptr<T>(), a.exp_avg.data_ptr<T>(),
                      a.exp_avg_sq.data_ptr<T>(), ams ? a.max_exp_avg_sq.data_ptr<T>() : nullptr});
      numels.push_back(a.param.numel());
      extras.push_back({static_cast<T>(-a.step_size), static_cast<T>(a.bias_correction2_sqrt)});
    }
    cuda_kernels::multi_tensor_apply(ctx, ptrs, numels, extras, op, "_fused_adam_");
  });
}

}  // namespace

void register_fused_optim_multi_cuda_kernels() {
  sgd_multi_step_stub.set(DeviceType::CUDA, sgd_multi_step_cuda);
  adam_multi_step_stub.set(DeviceType::CUDA, adam_multi_step_cuda);
}

}  // namespace minidl
