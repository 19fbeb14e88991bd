// CUDA kernels of ops/amp.h (GradScaler), on the current stream of the
// tensors' device; the math is ops/amp_math.h's, shared with the CPU kernels.
//
// Unscaling: one grid-stride launch per gradient. Threads that meet an inf or
// NaN store 1.0f into found_inf; every writer stores the same value, so the
// "reduction" is an idempotent max that needs neither atomics nor CUB, and the
// host never reads it here. Updating the scale: one thread (PyTorch's
// amp_update_scale_cuda_kernel is <<<1, 1>>> too).
//
// Run on an H100 (tests/test_cuda_grad_scaler, 2026-11-26).
#include <algorithm>
#include <type_traits>

#include "minidl/core/cuda/runtime.h"
#include "minidl/core/dtype.h"
#include "minidl/ops/amp.h"
#include "minidl/ops/amp_math.h"

namespace minidl {

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void unscale_kernel(T* g, int64_t n, const float* inv_scale, float* found_inf) {
  const float inv = *inv_scale;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    g[i] = amp_math::unscale_element(g[i], inv, found_inf);
}

__global__ void update_scale_kernel(float* scale, int64_t* growth_tracker, const float* found_inf,
                                    double growth_factor, double backoff_factor, int64_t growth_interval) {
  amp_math::update_scale(scale, growth_tracker, *found_inf, growth_factor, backoff_factor, growth_interval);
}

void non_finite_check_and_unscale_cuda(const AmpUnscaleArgs& a) {
  cuda::DeviceGuard guard(a.found_inf.device());
  cudaStream_t stream = cuda::current_stream(a.found_inf.device().index);
  const float* inv_scale = a.inv_scale.data_ptr<float>();
  float* found_inf = a.found_inf.data_ptr<float>();
  for (const Tensor& g : a.grads) {
    const int64_t n = g.numel();
    if (n == 0) continue;
    const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
    MINIDL_DISPATCH_ALL_AND_HALF(g.dtype(), "_amp_foreach_non_finite_check_and_unscale_", [&] {
      if constexpr (std::is_integral_v<scalar_t>) {
        MINIDL_FAIL("_amp_foreach_non_finite_check_and_unscale_: expected floating-point gradients, got ",
                    dtype_name(g.dtype()));
      } else {
        unscale_kernel<scalar_t><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
            g.data_ptr<scalar_t>(), n, inv_scale, found_inf);
        MINIDL_CUDA_KERNEL_LAUNCH_CHECK("_amp_foreach_non_finite_check_and_unscale_");
      }
    });
  }
}

void update_scale_cuda(const AmpUpdateScaleArgs& a) {
  cuda::DeviceGuard guard(a.scale.device());
  cudaStream_t stream = cuda::current_stream(a.scale.device().index);
  update_scale_kernel<<<1, 1, 0, stream>>>(a.scale.data_ptr<float>(), a.growth_tracker.data_ptr<int64_t>(),
                                           a.found_inf.data_ptr<float>(), a.growth_factor, a.backoff_factor,
                                           a.growth_interval);
  MINIDL_CUDA_KERNEL_LAUNCH_CHECK("_amp_update_scale_");
}

}  // namespace

void register_amp_cuda_kernels() {
  amp_non_finite_check_and_unscale_stub.set(DeviceType::CUDA, non_finite_check_and_unscale_cuda);
  amp_update_scale_stub.set(DeviceType::CUDA, update_scale_cuda);
}

}  // namespace minidl
