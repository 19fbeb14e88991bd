// CPU kernels of ops/amp.h (GradScaler): the math is ops/amp_math.h's, shared
// with the CUDA kernels. Unscaling is an OpenMP loop per gradient whose
// threads each keep a private found_inf flag, max-reduced at the end (the
// found_inf tensor is written once, after the loop, and only to set it).
#include <algorithm>
#include <type_traits>

#include "minidl/core/dtype.h"
#include "minidl/ops/amp.h"
#include "minidl/ops/amp_math.h"

namespace minidl {

namespace {

template <class T>
float unscale_typed(T* g, int64_t n, float inv_scale) {
  float seen = 0.0f;
#pragma omp parallel for reduction(max : seen) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) g[i] = amp_math::unscale_element(g[i], inv_scale, &seen);
  return seen;
}

void non_finite_check_and_unscale_cpu(const AmpUnscaleArgs& a) {
  const float inv_scale = *a.inv_scale.data_ptr<float>();
  float seen = 0.0f;
  for (const Tensor& g : a.grads) {
    const float s = MINIDL_DISPATCH_ALL_AND_HALF(g.dtype(), "_amp_foreach_non_finite_check_and_unscale_", [&] {
      if constexpr (std::is_integral_v<scalar_t>) {
        MINIDL_FAIL("_amp_foreach_non_finite_check_and_unscale_: expected floating-point gradients, got ",
                    dtype_name(g.dtype()));
        return 0.0f;
      } else {
        return unscale_typed(g.data_ptr<scalar_t>(), g.numel(), inv_scale);
      }
    });
    seen = std::max(seen, s);
  }
  if (seen != 0.0f) *a.found_inf.data_ptr<float>() = 1.0f;
}

void update_scale_cpu(const AmpUpdateScaleArgs& a) {
  amp_math::update_scale(a.scale.data_ptr<float>(), a.growth_tracker.data_ptr<int64_t>(),
                         *a.found_inf.data_ptr<float>(), a.growth_factor, a.backoff_factor, a.growth_interval);
}

}  // namespace

void register_amp_cpu_kernels() {
  amp_non_finite_check_and_unscale_stub.set(DeviceType::CPU, non_finite_check_and_unscale_cpu);
  amp_update_scale_stub.set(DeviceType::CPU, update_scale_cpu);
}

}  // namespace minidl
