// 16-byte loads and stores for contiguous elementwise kernels (the norm
// normalize and backward-dx passes): a thread per 16-byte vector of elements
// (4 float, 2 double, 8 float16/bfloat16), one load instruction per input
// array instead of 4-8, when every vector-accessed pointer is 16-byte aligned.
// The last n % N elements go a thread each in the same kernel. Element i's
// result is the same function of its inputs as on the scalar path: bit-equal.
// Compiled, not run on a GPU.
//
// F provides  template <int N> __device__ void vec(int64_t i0) const;  (elements i0 .. i0+N-1)
//             __device__ void scalar(int64_t i) const;
#pragma once

#include <cstdint>
#include <initializer_list>

#include "minidl/ops/cuda/launch.cuh"

namespace minidl::cuda_kernels {

template <class T>
inline constexpr int kVecElems = static_cast<int>(16 / sizeof(T));

template <class T, int N>
struct alignas(16) Vec {
  T v[N];
};

template <class T, int N>
__device__ inline Vec<T, N> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}

template <class T, int N>
__device__ inline void store_vec(T* p, const Vec<T, N>& v) {
  *reinterpret_cast<Vec<T, N>*>(p) = v;
}

template <int N, class F>
__global__ void vectorized_kernel(int64_t nvec, int64_t n, F f) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = t; v < nvec; v += static_cast<int64_t>(gridDim.x) * blockDim.x) f.template vec<N>(v * N);
  if (nvec * N + t < n) f.scalar(nvec * N + t);  // the tail: fewer than N elements
}

inline bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Launches f vectorized over n elements of T and returns true when the
// pointers are aligned and there is work; false: the caller takes its scalar path.
template <class T, class F>
bool launch_vectorized(const LaunchContext& ctx, int64_t n, std::initializer_list<const void*> ptrs, const F& f,
                       const char* op) {
  constexpr int N = kVecElems<T>;
  if (n <= 0 || !aligned16(ptrs)) return false;
  const int64_t nvec = n / N, tail = n - nvec * N;
  vectorized_kernel<N><<<blocks_for(nvec > tail ? nvec : tail), kThreads, 0, ctx.stream>>>(nvec, n, f);
  MINIDL_CUDA_KERNEL_LAUNCH_CHECK(op);
  return true;
}

}  // namespace minidl::cuda_kernels
