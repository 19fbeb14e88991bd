// The kernel tables of ops/fused_optim.h and the multi-tensor path's argument
// checks; the CPU kernels are in ops/cpu/fused_optim.cpp, the CUDA ones in
// ops/cuda/fused_optim.cu and ops/cuda/fused_optim_multi.cu, the callers in optim/.
#include "minidl/ops/fused_optim.h"

#include "minidl/core/check.h"

namespace minidl {

DispatchStub<SgdStepFn> sgd_step_stub("sgd_step");
DispatchStub<AdamStepFn> adam_step_stub("adam_step");
DispatchStub<VectorNormFn> vector_norm_stub("vector_norm");
DispatchStub<ClipGradScaleFn> clip_grad_scale_stub("clip_grad_scale");
DispatchStub<SgdMultiStepFn> sgd_multi_step_stub("_fused_sgd_");
DispatchStub<AdamMultiStepFn> adam_multi_step_stub("_fused_adam_");
DispatchStub<VectorNormsFn> vector_norms_stub("_foreach_norm");
DispatchStub<ClipGradScaleMultiFn> clip_grad_scale_multi_stub("_foreach_clip_grad_scale_");

namespace {

// The capturable scalars of ops/fused_optim.h: checked apart from the state.
bool is_scalar_slot(const SgdStepArgs& a, const Tensor& t) { return t.is_same(a.lr_tensor); }
bool is_scalar_slot(const AdamStepArgs& a, const Tensor& t) {
  return t.is_same(a.lr_tensor) || t.is_same(a.step_tensor);
}

void check_scalar_tensor(const Tensor& t, DType dtype, const Tensor& param, const char* what, const char* op) {
  MINIDL_CHECK(t.numel() == 1 && t.dtype() == dtype && t.device() == param.device(), op, ": expected ", what,
               " to be a one-element ", dtype_name(dtype), " tensor on ", param.device().str(), ", got ",
               shape_str(t.shape()), " of ", dtype_name(t.dtype()), " on ", t.device().str());
}

// Every defined tensor of `a` has param's dtype, device, size and dense
// layout (contiguous or channels-last: the kernels walk them as flat arrays).
template <class Args>
void check_tensors_match(const Args& a, const Tensor& first, const char* op) {
  MINIDL_CHECK(a.param.defined() && a.grad.defined(), op, ": expected a parameter and its gradient");
  MINIDL_CHECK(is_non_overlapping_and_dense(a.param), op,
               ": expected a dense parameter (contiguous or channels-last), got strides ",
               shape_str(a.param.strides()));
  MINIDL_CHECK(a.param.dtype() == first.dtype() && a.param.device() == first.device(), op,
               ": expected all parameters to have the same dtype and device, got ", dtype_name(first.dtype()), " on ",
               first.device().str(), " and ", dtype_name(a.param.dtype()), " on ", a.param.device().str());
  a.for_each_tensor([&](const Tensor& t) {
    if (!t.defined() || is_scalar_slot(a, t)) return;
    MINIDL_CHECK(t.dtype() == a.param.dtype() && t.device() == a.param.device() && walks_with(t, a.param),
                 op, ": expected the gradient and state of a parameter to match it in dtype, device, size and ",
                 "layout (", dtype_name(a.param.dtype()), " on ", a.param.device().str(), ", size ",
                 shape_str(a.param.shape()), ", strides ", shape_str(a.param.strides()), "), got ",
                 dtype_name(t.dtype()), " on ", t.device().str(), ", size ", shape_str(t.shape()), ", strides ",
                 shape_str(t.strides()));
  });
}

}  // namespace

bool walks_with(const Tensor& t, const Tensor& param) {
  return t.numel() == param.numel() &&
         ((t.is_contiguous() && param.is_contiguous()) || same_dense_layout(t, param));
}

void check_multi_step(const MultiStepArgs<SgdStepArgs>& args, const char* op) {
  if (args.tensors.empty()) return;
  const SgdStepArgs& h = args.tensors.front();
  for (const SgdStepArgs& a : args.tensors) {
    check_tensors_match(a, h.param, op);
    MINIDL_CHECK(a.lr == h.lr && a.momentum == h.momentum && a.dampening == h.dampening &&
                     a.weight_decay == h.weight_decay && a.nesterov == h.nesterov &&
                     a.momentum_buffer.defined() == h.momentum_buffer.defined() &&
                     a.lr_tensor.is_same(h.lr_tensor),
                 op, ": expected all parameters of one call to share the hyperparameters");
    if (a.lr_tensor.defined()) check_scalar_tensor(a.lr_tensor, kFloat64, a.param, "lr_tensor", op);
  }
}

void check_multi_step(const MultiStepArgs<AdamStepArgs>& args, const char* op) {
  if (args.tensors.empty()) return;
  const AdamStepArgs& h = args.tensors.front();
  for (const AdamStepArgs& a : args.tensors) {
    check_tensors_match(a, h.param, op);
    MINIDL_CHECK(a.exp_avg.defined() && a.exp_avg_sq.defined(), op, ": expected exp_avg and exp_avg_sq");
    MINIDL_CHECK(a.lr == h.lr && a.beta1 == h.beta1 && a.beta2 == h.beta2 && a.eps == h.eps &&
                     a.weight_decay == h.weight_decay && a.decoupled_weight_decay == h.decoupled_weight_decay &&
                     a.max_exp_avg_sq.defined() == h.max_exp_avg_sq.defined() &&
                     a.lr_tensor.is_same(h.lr_tensor),
                 op, ": expected all parameters of one call to share the hyperparameters");
    MINIDL_CHECK(a.lr_tensor.defined() == a.step_tensor.defined(), op,
                 ": expected lr_tensor and step_tensor together (capturable) or neither");
    if (a.lr_tensor.defined()) {
      check_scalar_tensor(a.lr_tensor, kFloat64, a.param, "lr_tensor", op);
      check_scalar_tensor(a.step_tensor, kFloat32, a.param, "step_tensor", op);
    }
  }
}

namespace {

// xs: dense (contiguous or channels-last: read as flat arrays), floating, one dtype and device.
void check_same_kind(const std::vector<Tensor>& xs, const char* op) {
  for (const Tensor& x : xs) {
    MINIDL_CHECK(x.defined() && is_non_overlapping_and_dense(x), op,
                 ": expected defined, dense (contiguous or channels-last) tensors");
    MINIDL_CHECK(is_floating(x.dtype()), op, ": expected floating-point tensors, got ", dtype_name(x.dtype()));
    MINIDL_CHECK(x.dtype() == xs.front().dtype() && x.device() == xs.front().device(), op,
                 ": expected all tensors to have the same dtype and device, got ", dtype_name(xs.front().dtype()),
                 " on ", xs.front().device().str(), " and ", dtype_name(x.dtype()), " on ", x.device().str());
  }
}

}  // namespace

void check_vector_norms(const VectorNormsArgs& args) {
  MINIDL_CHECK(args.outs.size() == args.xs.size(), "_foreach_norm: expected one output per tensor, got ",
               args.outs.size(), " outputs for ", args.xs.size(), " tensors");
  check_same_kind(args.xs, "_foreach_norm");
  for (const Tensor& o : args.outs)
    MINIDL_CHECK(o.defined() && o.numel() == 1 && o.dtype() == kFloat64, "_foreach_norm: expected float64 one-element outputs");
}

void check_clip_grad_scale_multi(const ClipGradScaleMultiArgs& args) {
  check_same_kind(args.grads, "clip_grad_norm_");
  MINIDL_CHECK(args.total_norm.defined() && args.total_norm.numel() == 1 && args.total_norm.dtype() == kFloat64,
               "clip_grad_norm_: expected total_norm to be a float64 one-element tensor");
}

}  // namespace minidl
