// The per-element and per-step math of GradScaler's two device kernels
// (ops/amp.h), shared by the CPU kernels (ops/cpu/amp.cpp) and the CUDA ones
// (ops/cuda/amp.cu), so both backends compute the same bits. PyTorch's
// counterparts: aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp and
// aten/src/ATen/native/cuda/AmpKernels.cu. No CUDA header here: nvcc sees
// MINIDL_HOST_DEVICE as __host__ __device__, the host compiler as nothing.
#pragma once

#include <cmath>
#include <cstdint>

#include "minidl/core/half.h"

namespace minidl::amp_math {

template <class T>
MINIDL_HOST_DEVICE inline bool is_finite(T x) {
#if defined(__CUDA_ARCH__)
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}

// The type an element is unscaled in: float for the 16-bit types (PyTorch's
// opmath_type), the element type itself for float32 and float64.
template <class T> struct opmath { using type = T; };
template <> struct opmath<Half> { using type = float; };
template <> struct opmath<BFloat16> { using type = float; };

// One scaled gradient element: sets *found_inf to 1 when it is inf or NaN
// (the only value ever written, so concurrent writers need no atomics) and
// returns it times inv_scale, untouched when inv_scale is 1 (PyTorch skips the
// multiply then, which keeps -0.0 and NaN payloads as they are). float32
// elements multiply in float32, float64 ones in float64 (inv_scale widened),
// 16-bit ones in float32 and round back.
template <class T>
MINIDL_HOST_DEVICE inline T unscale_element(T value, float inv_scale, float* found_inf) {
  using M = typename opmath<T>::type;
  const M v = static_cast<M>(value);
  if (!is_finite(v)) *found_inf = 1.0f;
  return inv_scale == 1.0f ? value : static_cast<T>(v * static_cast<M>(inv_scale));
}

// torch._amp_update_scale_, one step of the dynamic loss scale:
//   found_inf != 0: scale *= backoff_factor, growth_tracker = 0;
//   otherwise tracker + 1, and when that equals growth_interval:
//     scale *= growth_factor (kept as is if the product overflows float32),
//     tracker = 0.
// The products are taken in double and rounded to float32, as PyTorch's
// float * double. The tracker is int64 here (PyTorch: int32; minidl has no
// int32 dtype); only its value is observable.
MINIDL_HOST_DEVICE inline void update_scale(float* scale, int64_t* growth_tracker, float found_inf,
                                            double growth_factor, double backoff_factor, int64_t growth_interval) {
  if (found_inf != 0.0f) {
    *scale = static_cast<float>(static_cast<double>(*scale) * backoff_factor);
    *growth_tracker = 0;
    return;
  }
  const int64_t successful = *growth_tracker + 1;
  if (successful == growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(*scale) * growth_factor);
    if (is_finite(grown)) *scale = grown;
    *growth_tracker = 0;
  } else {
    *growth_tracker = successful;
  }
}

}  // namespace minidl::amp_math
