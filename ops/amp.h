// The device kernels behind amp::GradScaler (optim/grad_scaler.h): PyTorch's
// torch._amp_foreach_non_finite_check_and_unscale_ and torch._amp_update_scale_.
//
// Both work in place on device tensors and never read device memory on the
// host: found_inf, the scale and the growth tracker stay on the device, so a
// training step with a GradScaler reads the device once (GradScaler::step's
// "did any gradient overflow?"). Their per-element math is in ops/amp_math.h.
// Not differentiable (they run on gradients, under no_grad).
#pragma once

#include <vector>

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl {

// For each tensor of `grads` (same device and dtype: float32, float64,
// float16 or bfloat16), in place: g = g * inv_scale (untouched when inv_scale
// is 1), and found_inf = 1 if any element of any of them is inf or NaN.
// found_inf is never reset here (the caller zeroes it first, so several
// calls can share one). found_inf and inv_scale: one-element float32 tensors
// on the gradients' device. Checks arguments with PyTorch's messages; an
// empty list does nothing.
void amp_foreach_non_finite_check_and_unscale_(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                                const Tensor& inv_scale);

// In place, on the device (ops/amp_math.h update_scale):
//   found_inf != 0: scale *= backoff_factor, growth_tracker = 0;
//   else growth_tracker += 1, and at growth_interval scale *= growth_factor
//   (unless that overflows float32) and growth_tracker = 0.
// scale: a one-element float32 tensor; growth_tracker: a one-element int64
// tensor (PyTorch's is int32); found_inf: a one-element float32 tensor; all on
// one device. Returns scale.
const Tensor& amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                                double growth_factor, double backoff_factor, int64_t growth_interval);

// ---- kernel interface (a backend registers its kernels here) ----------------

// grads: contiguous, non-empty list of one dtype; found_inf, inv_scale:
// one-element float32 (checked by the caller).
struct AmpUnscaleArgs {
  std::vector<Tensor> grads;
  Tensor found_inf, inv_scale;

  void for_each_tensor(auto&& f) const {
    for (const Tensor& g : grads) f(g);
    f(found_inf);
    f(inv_scale);
  }
};

struct AmpUpdateScaleArgs {
  Tensor scale, growth_tracker, found_inf;
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;

  void for_each_tensor(auto&& f) const {
    for (const Tensor* t : {&scale, &growth_tracker, &found_inf}) f(*t);
  }
};

using AmpNonFiniteCheckAndUnscaleFn = void(const AmpUnscaleArgs& args);
using AmpUpdateScaleFn = void(const AmpUpdateScaleArgs& args);
extern DispatchStub<AmpNonFiniteCheckAndUnscaleFn> amp_non_finite_check_and_unscale_stub;
extern DispatchStub<AmpUpdateScaleFn> amp_update_scale_stub;
void register_amp_cpu_kernels();

}  // namespace minidl
