// 16-byte loads and stores for contiguous elementwise kernels (the norm
// normalize and backward-dx passes): a thread per 16-byte vector of elements
// (4 float, 2 double, 8 float16/bfloat16), one load instruction per input
// array instead of 4-8, when every vector-accessed pointer is 16-byte aligned.
// The last n % N elements go a thread each in the same kernel. Element i's
// result is the same function of its inputs as on the scalar path: bit-equal.
// The norm passes ran on an H100 (aligned, unaligned views, tails:
// tests/test_cuda_ops, test_cuda_ops_half, 2026-11-27); the contiguous maps
// below (unary and binary ops) in both suites' run C (bench/RESULTS.md), but
// test_cuda_ops' vector-tail and unaligned-view cases passed in the third H100 run
// (2026-11-27 18:39).
//
// F provides  template <int N> __device__ void vec(int64_t i0) const;  (elements i0 .. i0+N-1)
//             __device__ void scalar(int64_t i) const;
#pragma once

#include <cstdint>
#include <initializer_list>

#include "minidl/core/tensor.h"

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

// out = e(a) or e(a, b) elementwise over operands that are all contiguous with
// out's shape (no broadcasting, no views with gaps), through launch_vectorized;
// `e` maps stored values to a stored value (the op's per-element function,
// the same one the strided path calls, so both give the same bits). False:
// not contiguous or not aligned, and nothing was launched.
// Why: the strided elementwise kernel moves one element per thread; on an
// H100 ResNet-18's ReLU and residual-add kernels took twice PyTorch's
// 4-wide vectorized ones (bench/RESULTS.md, 2026-11-27).
template <class T, class E>
struct ContiguousMap1 {
  T* out;
  const T* a;
  E e;
  template <int N>
  __device__ void vec(int64_t i0) const {
    const Vec<T, N> va = load_vec<T, N>(a + i0);
    Vec<T, N> r;
#pragma unroll
    for (int j = 0; j < N; ++j) r.v[j] = e(va.v[j]);
    store_vec(out + i0, r);
  }
  __device__ void scalar(int64_t i) const { out[i] = e(a[i]); }
};

template <class T, class E>
struct ContiguousMap2 {
  T* out;
  const T* a;
  const T* b;
  E e;
  template <int N>
  __device__ void vec(int64_t i0) const {
    const Vec<T, N> va = load_vec<T, N>(a + i0), vb = load_vec<T, N>(b + i0);
    Vec<T, N> r;
#pragma unroll
    for (int j = 0; j < N; ++j) r.v[j] = e(va.v[j], vb.v[j]);
    store_vec(out + i0, r);
  }
  __device__ void scalar(int64_t i) const { out[i] = e(a[i], b[i]); }
};

inline bool all_contiguous_like(const Tensor& out, std::initializer_list<const Tensor*> inputs) {
  if (!out.is_contiguous()) return false;
  for (const Tensor* t : inputs)
    if (!t->is_contiguous() || t->shape() != out.shape()) return false;
  return true;
}

template <class T, class E>
bool launch_contiguous_map(const LaunchContext& ctx, const Tensor& out, const Tensor& a, const E& e, const char* op) {
  if (!all_contiguous_like(out, {&a})) return false;
  const ContiguousMap1<T, E> f{static_cast<T*>(out.raw_data()), static_cast<const T*>(a.raw_data()), e};
  return launch_vectorized<T>(ctx, out.numel(), {f.out, f.a}, f, op);
}

template <class T, class E>
bool launch_contiguous_map(const LaunchContext& ctx, const Tensor& out, const Tensor& a, const Tensor& b, const E& e,
                           const char* op) {
  if (!all_contiguous_like(out, {&a, &b})) return false;
  const ContiguousMap2<T, E> f{static_cast<T*>(out.raw_data()), static_cast<const T*>(a.raw_data()),
                               static_cast<const T*>(b.raw_data()), e};
  return launch_vectorized<T>(ctx, out.numel(), {f.out, f.a, f.b}, f, op);
}

}  // namespace minidl::cuda_kernels
