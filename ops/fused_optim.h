// The kernels behind optim/: one optimizer step of one parameter (SGD,
// Adam/AdamW), and the per-tensor norm and gradient scaling of
// clip_grad_norm_. PyTorch's counterparts are the per-tensor bodies of
// _fused_sgd / _fused_adam and of clip_grad_norm_'s foreach norm and mul.
// The multi-tensor stubs below take many parameters at once (what optim/
// calls); their CPU kernels loop over the per-tensor ones.
//
// Every kernel updates device memory in place and never reads it back to the
// host: scalars that depend on the step count (Adam's bias corrections) are
// computed by the caller on the host from the optimizer's CPU step counter
// and passed in, and clip_grad_norm_'s total norm stays a device tensor that
// the scaling kernel reads on the device.
//
// Capturable (PyTorch's capturable=True, for CUDA graphs, whose replays reuse
// the kernel arguments of the capture): the multi-tensor kernels then read
// the lr from lr_tensor and Adam's step from step_tensor, both in device
// memory, and increment the step themselves, so a replayed step follows the
// schedule. Same arithmetic as the host path (double, rounded to the
// parameter's dtype); on the CUDA side pow() is the device's, so the bias
// corrections may differ from the host's in the last bit.
#pragma once

#include <algorithm>
#include <vector>

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl {

// ---- kernel interface (a backend registers its kernels here) ----------------

// One SGD step, in place on param (and momentum_buffer), per element with g
// the gradient (torch.optim.SGD's single-tensor path):
//   g = g + weight_decay * p                       (if weight_decay != 0)
//   b = first_step ? g : momentum * b + (1 - dampening) * g   (if momentum_buffer)
//   g = nesterov ? g + momentum * b : b            (if momentum_buffer)
//   p = p - lr * g
// param, grad and momentum_buffer: one dense layout (contiguous, or all
// channels-last: walked as flat arrays), same dtype, shape and device;
// momentum_buffer undefined when momentum == 0 (first_step: it holds garbage).
struct SgdStepArgs {
  Tensor param, grad, momentum_buffer;
  double lr = 0.0, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = false;
  // Capturable (multi-tensor path only): a 0-d float64 tensor on param's
  // device holding the lr, which then replaces `lr`.
  Tensor lr_tensor;

  void for_each_tensor(auto&& f) const {
    for (const Tensor* t : {&param, &grad, &momentum_buffer, &lr_tensor}) f(*t);
  }
};

// One Adam/AdamW step, in place, per element (torch.optim.Adam's single-tensor path):
//   decoupled: p = p * (1 - lr * weight_decay)   else: g = g + weight_decay * p
//   m = m + (1 - beta1) * (g - m)
//   v = beta2 * v + (1 - beta2) * g * g
//   v_max = max(v_max, v)                        (max_exp_avg_sq defined: amsgrad; v_max replaces v)
//   p = p - step_size * m / (sqrt(v) / bias_correction2_sqrt + eps)
// with step_size = lr / (1 - beta1^t) and bias_correction2_sqrt = sqrt(1 - beta2^t)
// computed on the host from the step t. All tensors of one dense layout
// (contiguous or channels-last), same dtype, shape and device.
struct AdamStepArgs {
  Tensor param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq;
  double lr = 0.0, beta1 = 0.0, beta2 = 0.0, eps = 0.0, weight_decay = 0.0;
  bool decoupled_weight_decay = false;
  double step_size = 0.0;
  double bias_correction2_sqrt = 1.0;
  // Capturable (multi-tensor path only, both or neither): lr_tensor a 0-d
  // float64 tensor holding the lr, step_tensor this parameter's 0-d float32
  // step, both on param's device. The kernel adds 1 to the step, then computes
  // step_size, bias_correction2_sqrt and (decoupled) 1 - lr * weight_decay
  // from them; `lr`, `step_size` and `bias_correction2_sqrt` are ignored.
  Tensor lr_tensor, step_tensor;

  void for_each_tensor(auto&& f) const {
    for (const Tensor* t : {&param, &grad, &exp_avg, &exp_avg_sq, &max_exp_avg_sq, &lr_tensor, &step_tensor}) f(*t);
  }
};

// out (one float64 element, e.g. a 0-d view into a vector of norms) =
// ||x||_p of contiguous x, accumulated in double: (sum |x|^p)^(1/p), or max |x|
// for p = inf (0 for an empty x).
using VectorNormFn = void(const Tensor& out, const Tensor& x, double norm_type);
// grad *= min(max_norm / (total_norm + 1e-6), 1), the factor computed in
// double and rounded to grad's dtype (as grad.mul_(factor)); grad contiguous,
// total_norm a float64 0-d tensor on grad's device.
using ClipGradScaleFn = void(const Tensor& grad, const Tensor& total_norm, double max_norm);

using SgdStepFn = void(const SgdStepArgs& args);
using AdamStepFn = void(const AdamStepArgs& args);
extern DispatchStub<SgdStepFn> sgd_step_stub;
extern DispatchStub<AdamStepFn> adam_step_stub;
extern DispatchStub<VectorNormFn> vector_norm_stub;
extern DispatchStub<ClipGradScaleFn> clip_grad_scale_stub;

// ---- multi-tensor path (PyTorch's _fused_sgd_ / _fused_adam_) ----------------
// Many parameters of one dtype and device in one call, which the CUDA kernel
// packs into a few launches (ops/cuda/multi_tensor_apply.cuh) instead of one
// per parameter. Every entry obeys its single-tensor contract above, and all
// share the hyperparameters (lr, momentum, dampening, weight_decay, nesterov;
// lr, betas, eps, weight_decay, decoupled, amsgrad or not); they may differ
// only in what depends on a parameter's own state: first_step (SGD),
// step_size and bias_correction2_sqrt (Adam: per-parameter step counts).
// check_multi_step says so with the op's name. The optimizers (optim/sgd.cpp,
// optim/adam.cpp) call these once per (device, dtype) of a param group.
// Whether a gradient or state tensor t can be walked with its parameter as
// flat arrays: equal numel and both contiguous, or one dense layout
// (channels-last parameters). The step kernels require it of every tensor.
bool walks_with(const Tensor& t, const Tensor& param);

template <class Args>
struct MultiStepArgs {
  std::vector<Args> tensors;

  void for_each_tensor(auto&& f) const {
    for (const Args& a : tensors) a.for_each_tensor(f);
  }
};
using SgdMultiStepFn = void(const MultiStepArgs<SgdStepArgs>& args);
using AdamMultiStepFn = void(const MultiStepArgs<AdamStepArgs>& args);
extern DispatchStub<SgdMultiStepFn> sgd_multi_step_stub;
extern DispatchStub<AdamMultiStepFn> adam_multi_step_stub;

// clip_grad_norm_'s norms and scaling over many gradients in a few launches
// (PyTorch's _foreach_norm and _foreach_mul_): outs[i] (a float64 0-d
// tensor, e.g. a view into a vector of norms) = ||xs[i]||_p as vector_norm_stub
// computes it; and every grad *= the clip factor of total_norm, as
// clip_grad_scale_stub. xs / grads: dense (contiguous or channels-last), one
// dtype, on one device.
struct VectorNormsArgs {
  std::vector<Tensor> outs, xs;
  double norm_type = 2.0;

  void for_each_tensor(auto&& f) const {
    for (const Tensor& t : outs) f(t);
    for (const Tensor& t : xs) f(t);
  }
};
struct ClipGradScaleMultiArgs {
  std::vector<Tensor> grads;
  Tensor total_norm;
  double max_norm = 0.0;

  void for_each_tensor(auto&& f) const {
    for (const Tensor& t : grads) f(t);
    f(total_norm);
  }
};
using VectorNormsFn = void(const VectorNormsArgs& args);
using ClipGradScaleMultiFn = void(const ClipGradScaleMultiArgs& args);
extern DispatchStub<VectorNormsFn> vector_norms_stub;
extern DispatchStub<ClipGradScaleMultiFn> clip_grad_scale_multi_stub;
// Throw (naming the op) unless the lists are as described above.
void check_vector_norms(const VectorNormsArgs& args);
void check_clip_grad_scale_multi(const ClipGradScaleMultiArgs& args);

// Splits per-parameter args into one MultiStepArgs per (device, dtype) of the
// parameters, in order of first appearance (a param group mixing devices or
// dtypes takes one call per kind, as PyTorch's _group_tensors_by_device_and_dtype).
template <class Args>
std::vector<MultiStepArgs<Args>> group_by_device_and_dtype(std::vector<Args> args) {
  std::vector<MultiStepArgs<Args>> groups;
  for (Args& a : args) {
    auto same_kind = [&](const MultiStepArgs<Args>& g) {
      const Tensor& p = g.tensors.front().param;
      return p.device() == a.param.device() && p.dtype() == a.param.dtype();
    };
    auto it = std::find_if(groups.begin(), groups.end(), same_kind);
    if (it == groups.end()) it = groups.insert(groups.end(), MultiStepArgs<Args>{});
    it->tensors.push_back(std::move(a));
  }
  return groups;
}

// Throws (naming `op`) unless all entries share dtype, device and
// hyperparameters as described above, and each tensor matches its param.
void check_multi_step(const MultiStepArgs<SgdStepArgs>& args, const char* op);
void check_multi_step(const MultiStepArgs<AdamStepArgs>& args, const char* op);

void register_fused_optim_cpu_kernels();

}  // namespace minidl
