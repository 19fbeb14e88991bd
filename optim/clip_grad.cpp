// clip_grad_norm_: total = ||(||g_1||_p, ..., ||g_k||_p)||_p over the defined
// gradients (max |g| for p = inf), then g_i *= min(1, max_norm / (total + 1e-6)).
// The per-gradient norms are written into one float64 vector on the first
// gradient's device (vector_norms_stub: one call per dtype, a few launches on
// CUDA; vector_norm_stub for a gradient on another device), vector_norm_stub
// combines them, and clip_grad_scale_multi_stub scales the gradients of each
// device and dtype together, reading the total on their device.
// Not differentiable; runs under no_grad and overwrites the gradients in place.
#include "minidl/optim/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"
#include "minidl/ops/fused_optim.h"

namespace minidl::optim {

namespace {

std::vector<Tensor> defined_grads(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    MINIDL_CHECK(p.defined(), "clip_grad_norm_: got an undefined parameter");
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  return grads;
}

}  // namespace

Tensor get_total_norm(const std::vector<Tensor>& tensors, double norm_type, bool error_if_nonfinite) {
  MINIDL_CHECK(norm_type > 0.0, "clip_grad_norm_: expected norm_type > 0 (or inf), got ", norm_type);
  NoGradGuard no_grad;
  std::vector<Tensor> list;
  for (const Tensor& t : tensors)
    if (t.defined()) list.push_back(t);
  if (list.empty()) return zeros({}, kFloat64);

  const Device device = list[0].device();
  const TensorOptions f64 = TensorOptions(kFloat64).device(device);
  Tensor norms = empty({static_cast<int64_t>(list.size())}, f64);
  std::vector<VectorNormsArgs> by_dtype;  // the first device's tensors: one call per dtype
  for (size_t i = 0; i < list.size(); ++i) {
    const Tensor& t = list[i];
    MINIDL_CHECK(is_floating(t.dtype()), "clip_grad_norm_: expected floating-point gradients, got ",
                 dtype_name(t.dtype()));
    Tensor slot = norms.select(0, static_cast<int64_t>(i));
    if (t.device() == device) {
      auto it = std::find_if(by_dtype.begin(), by_dtype.end(),
                             [&](const VectorNormsArgs& a) { return a.xs.front().dtype() == t.dtype(); });
      if (it == by_dtype.end()) it = by_dtype.insert(by_dtype.end(), VectorNormsArgs{{}, {}, norm_type});
      it->outs.push_back(slot);
      // Read as a flat array: a channels-last gradient in its memory order (as
      // PyTorch's _foreach_norm); any other layout through a contiguous copy.
      it->xs.push_back(t.is_contiguous(MemoryFormat::ChannelsLast) ? t : t.contiguous());
    } else {  // PyTorch's norms.to(first_device): one scalar copy per foreign tensor
      Tensor own = empty({}, TensorOptions(kFloat64).device(t.device()));
      vector_norm_stub(t.device())(own, t.contiguous(), norm_type);
      slot.copy_(own);
    }
  }
  for (const VectorNormsArgs& a : by_dtype) vector_norms_stub(device)(a);
  Tensor total = empty({}, f64);
  vector_norm_stub(device)(total, norms, norm_type);
  if (error_if_nonfinite) {
    const double value = total.item<double>();
    MINIDL_CHECK(std::isfinite(value), "The total norm of order ", norm_type,
                 " for gradients from `parameters` is non-finite, so it cannot be clipped. To disable this error "
                 "and scale the gradients by the non-finite norm anyway, set `error_if_nonfinite=False`");
  }
  return total;
}

void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm, const Tensor& total_norm) {
  MINIDL_CHECK(total_norm.defined() && total_norm.numel() == 1 && is_floating(total_norm.dtype()),
               "clip_grads_with_norm_: expected total_norm to be a one-element floating tensor");
  NoGradGuard no_grad;
  const Tensor total = total_norm.dtype() == kFloat64 ? total_norm.reshape({}) : total_norm.to(kFloat64).reshape({});
  std::map<std::string, Tensor> on_device;  // the total, copied once to each gradient device
  std::vector<ClipGradScaleMultiArgs> by_kind;  // dense gradients: one call per device and dtype
  for (Tensor& g : defined_grads(params)) {
    const Device device = g.device();
    Tensor& t = on_device[device.str()];
    if (!t.defined()) t = total.device() == device ? total : total.to(device);
    if (is_non_overlapping_and_dense(g)) {  // scaled in place as a flat array
      auto it = std::find_if(by_kind.begin(), by_kind.end(), [&](const ClipGradScaleMultiArgs& a) {
        return a.grads.front().device() == device && a.grads.front().dtype() == g.dtype();
      });
      if (it == by_kind.end()) it = by_kind.insert(by_kind.end(), ClipGradScaleMultiArgs{{}, t, max_norm});
      it->grads.push_back(g);
    } else {
      Tensor c = g.contiguous();
      clip_grad_scale_stub(device)(c, t, max_norm);
      g.copy_(c);
    }
  }
  for (const ClipGradScaleMultiArgs& a : by_kind) clip_grad_scale_multi_stub(a.total_norm.device())(a);
  for (Tensor& g : defined_grads(params)) g.bump_version();
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  MINIDL_CHECK(norm_type > 0.0, "clip_grad_norm_: expected norm_type > 0 (or inf), got ", norm_type);
  const std::vector<Tensor> grads = defined_grads(params);
  if (grads.empty()) return 0.0;
  const Tensor total = get_total_norm(grads, norm_type, error_if_nonfinite);
  clip_grads_with_norm_(params, max_norm, total);
  return total.item<double>();
}

}  // namespace minidl::optim
