// GradScaler's kernels (ops/amp.h): argument checks with PyTorch's messages,
// then one kernel call per list (unscale) or per step (update). Both change
// their tensors in place and bump their versions; neither is differentiable
// nor reads device memory on the host.
#include "minidl/ops/amp.h"

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"

namespace minidl {

DispatchStub<AmpNonFiniteCheckAndUnscaleFn> amp_non_finite_check_and_unscale_stub("amp_non_finite_check_and_unscale");
DispatchStub<AmpUpdateScaleFn> amp_update_scale_stub("amp_update_scale");

namespace {

constexpr const char* kUnscaleOp = "_amp_foreach_non_finite_check_and_unscale_";
constexpr const char* kUpdateOp = "_amp_update_scale_";

void check_one_float(const Tensor& t, const char* op, const char* name) {
  MINIDL_CHECK(t.defined(), op, ": ", name, " is undefined");
  MINIDL_CHECK(t.numel() == 1, name, " must be a 1-element tensor.");
  MINIDL_CHECK(t.dtype() == kFloat32, name, " must be a float tensor.");
}

void check_same_device(const Tensor& t, Device device, const char* op, const char* name) {
  MINIDL_CHECK(t.device() == device, op, ": expected ", name, " on ", device.str(), ", got ", t.device().str());
}

}  // namespace

void amp_foreach_non_finite_check_and_unscale_(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                                const Tensor& inv_scale) {
  if (grads.empty()) return;
  check_one_float(inv_scale, kUnscaleOp, "inv_scale");
  check_one_float(found_inf, kUnscaleOp, "found_inf");
  const Device device = found_inf.device();
  check_same_device(inv_scale, device, kUnscaleOp, "inv_scale");
  MINIDL_CHECK(grads[0].defined(), kUnscaleOp, ": got an undefined gradient");
  const DType dtype = grads[0].dtype();
  MINIDL_CHECK(is_floating(dtype), kUnscaleOp, ": expected floating-point gradients, got ", dtype_name(dtype));

  NoGradGuard no_grad;
  AmpUnscaleArgs args{.grads = {}, .found_inf = found_inf, .inv_scale = inv_scale};
  std::vector<std::pair<Tensor, Tensor>> copied_back;  // (gradient that is not dense, its contiguous copy)
  for (const Tensor& g : grads) {
    MINIDL_CHECK(g.defined(), kUnscaleOp, ": got an undefined gradient");
    MINIDL_CHECK(g.dtype() == dtype, "All tensors in the tensor list must have the same dtype.");
    check_same_device(g, device, kUnscaleOp, "every scaled gradient");
    if (is_non_overlapping_and_dense(g)) {  // unscaled in place as a flat array
      args.grads.push_back(g);
    } else {
      args.grads.push_back(g.contiguous());
      copied_back.emplace_back(g, args.grads.back());
    }
  }
  amp_non_finite_check_and_unscale_stub(device)(args);
  for (auto& [g, c] : copied_back) g.copy_(c);  // copy_ bumps the version
  for (const Tensor& g : args.grads) g.bump_version();
  found_inf.bump_version();
}

const Tensor& amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                                double growth_factor, double backoff_factor, int64_t growth_interval) {
  MINIDL_CHECK(scale.defined() && growth_tracker.defined() && found_inf.defined(), kUpdateOp,
               ": got an undefined tensor");
  MINIDL_CHECK(growth_tracker.numel() == 1, "growth_tracker must be a 1-element tensor.");
  MINIDL_CHECK(scale.numel() == 1, "current_scale must be a 1-element tensor.");
  MINIDL_CHECK(found_inf.numel() == 1, "found_inf must be a 1-element tensor.");
  MINIDL_CHECK(growth_tracker.dtype() == kInt64, "growth_tracker must be an int64 tensor.");
  MINIDL_CHECK(scale.dtype() == kFloat32, "current_scale must be a float tensor.");
  MINIDL_CHECK(found_inf.dtype() == kFloat32, "found_inf must be a float tensor.");
  const Device device = scale.device();
  check_same_device(growth_tracker, device, kUpdateOp, "growth_tracker");
  check_same_device(found_inf, device, kUpdateOp, "found_inf");

  amp_update_scale_stub(device)(AmpUpdateScaleArgs{.scale = scale,
                                                   .growth_tracker = growth_tracker,
                                                   .found_inf = found_inf,
                                                   .growth_factor = growth_factor,
                                                   .backoff_factor = backoff_factor,
                                                   .growth_interval = growth_interval});
  scale.bump_version();
  growth_tracker.bump_version();
  return scale;
}

}  // namespace minidl
