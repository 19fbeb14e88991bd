// What every CUDA kernel file of ops/cuda/ shares: the dtype dispatch with
// CUDA's wording, launch geometry, the generic strided elementwise kernel,
// temporary device buffers from the caching allocator, and the launch
// context (device guard + current stream). CUDA builds only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "minidl/core/check.h"
#include "minidl/core/cuda/runtime.h"
#include "minidl/core/dtype.h"
#include "minidl/core/tensor.h"
#include "minidl/ops/cuda/opmath.h"
#include "minidl/ops/cuda/offset_calculator.h"

// As MINIDL_DISPATCH_FLOATING / MINIDL_DISPATCH_ALL, saying "on CUDA"; the
// _AND_HALF forms add float16 (minidl::Half) and bfloat16 (minidl::BFloat16)
// for the kernels that compute in opmath_t<scalar_t> (ops/cuda/opmath.h). The
// refusals keep the float32/float64 wording: the CPU ops that take the 16-bit
// types through Float32Compute say the same.
#define MINIDL_CUDA_CASES_FLOATING_(...)                       \
  MINIDL_DISPATCH_CASE_(Float32, float, __VA_ARGS__)           \
  MINIDL_DISPATCH_CASE_(Float64, double, __VA_ARGS__)
#define MINIDL_CUDA_CASES_INTEGER_(...)                        \
  MINIDL_DISPATCH_CASE_(Int64, int64_t, __VA_ARGS__)           \
  MINIDL_DISPATCH_CASE_(UInt8, uint8_t, __VA_ARGS__)
#define MINIDL_CUDA_CASES_HALF_(...)                           \
  MINIDL_DISPATCH_CASE_(Float16, ::minidl::Half, __VA_ARGS__)  \
  MINIDL_DISPATCH_CASE_(BFloat16, ::minidl::BFloat16, __VA_ARGS__)
#define MINIDL_CUDA_FAIL_FLOATING_(dtype, op) \
  MINIDL_FAIL(op, ": expected a float32 or float64 tensor on CUDA, got ", ::minidl::dtype_name(dtype))
#define MINIDL_CUDA_FAIL_ALL_(dtype, op) \
  MINIDL_FAIL(op, ": dtype ", ::minidl::dtype_name(dtype), " is not supported on CUDA")

#define MINIDL_CUDA_DISPATCH_FLOATING(dtype, op, ...) \
  [&] {                                               \
    switch (dtype) {                                  \
      MINIDL_CUDA_CASES_FLOATING_(__VA_ARGS__)        \
      default: MINIDL_CUDA_FAIL_FLOATING_(dtype, op); \
    }                                                 \
  }()
#define MINIDL_CUDA_DISPATCH_ALL(dtype, op, ...) \
  [&] {                                          \
    switch (dtype) {                             \
      MINIDL_CUDA_CASES_FLOATING_(__VA_ARGS__)   \
      MINIDL_CUDA_CASES_INTEGER_(__VA_ARGS__)    \
      default: MINIDL_CUDA_FAIL_ALL_(dtype, op); \
    }                                            \
  }()
#define MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(dtype, op, ...) \
  [&] {                                                        \
    switch (dtype) {                                           \
      MINIDL_CUDA_CASES_FLOATING_(__VA_ARGS__)                 \
      MINIDL_CUDA_CASES_HALF_(__VA_ARGS__)                     \
      default: MINIDL_CUDA_FAIL_FLOATING_(dtype, op);          \
    }                                                          \
  }()
#define MINIDL_CUDA_DISPATCH_ALL_AND_HALF(dtype, op, ...) \
  [&] {                                                   \
    switch (dtype) {                                      \
      MINIDL_CUDA_CASES_FLOATING_(__VA_ARGS__)            \
      MINIDL_CUDA_CASES_INTEGER_(__VA_ARGS__)             \
      MINIDL_CUDA_CASES_HALF_(__VA_ARGS__)                \
      default: MINIDL_CUDA_FAIL_ALL_(dtype, op);          \
    }                                                     \
  }()

namespace minidl::cuda_kernels {

inline constexpr int kThreads = 256;      // elementwise block size
inline constexpr int kReduceThreads = 256;  // one block per reduced row (CUB BlockReduce)
inline constexpr int64_t kMaxBlocks = 65536;  // grid-stride loops beyond this

inline int blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

// Everything one op's launches need: the device made current for the scope
// and the thread's current stream on it.
struct LaunchContext {
  explicit LaunchContext(Device d) : device(d), guard(d), stream(cuda::current_stream(d.index)) {}
  Device device;
  cuda::DeviceGuard guard;
  cudaStream_t stream;
};

// A temporary device buffer of `bytes` (CUB temp storage, partial results)
// from the caching allocator; keep the Tensor alive until the last launch
// that uses it has been enqueued (the allocator reuses it in stream order).
inline Tensor temp_buffer(int64_t bytes, Device device) {
  return empty({bytes < 1 ? 1 : bytes}, TensorOptions(kUInt8).device(device));
}

// The collapsed calculator for `shape` and N operands' strides; refuses
// (naming `op`) a layout with more than kMaxDims dims left after collapsing.
template <int N>
cuda_math::OffsetCalculator<N> offset_calculator(const Shape& shape, const Shape* const (&strides)[N], const char* op) {
  const int64_t* s[N];
  for (int k = 0; k < N; ++k) s[k] = strides[k]->data();
  cuda_math::OffsetCalculator<N> calc;
  const bool ok = cuda_math::make_offset_calculator<N>(shape.data(), static_cast<int>(shape.size()), s, calc);
  MINIDL_CHECK(ok, op, ": CUDA kernels take at most ", cuda_math::kMaxDims,
               " non-mergeable dims, got a tensor of shape ", shape_str(shape));
  return calc;
}

// The calculator of one contiguous operand of n elements (index i -> offset i),
// for kernels that map threads to flat indices.
inline cuda_math::OffsetCalculator<1> linear(int64_t n, const char* op) {
  const Shape shape{n}, strides{1};
  return offset_calculator<1>(shape, {&strides}, op);
}

// for i in [0, n): f(calc.get(i)); grid-stride, so any n fits the grid.
template <int N, class F>
__global__ void elementwise_kernel(int64_t n, cuda_math::OffsetCalculator<N> calc, F f) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    f(calc.get(i));
}

template <int N, class F>
void launch_elementwise(const LaunchContext& ctx, int64_t n, const cuda_math::OffsetCalculator<N>& calc, F f,
                        const char* op) {
  if (n == 0) return;
  elementwise_kernel<N, F><<<blocks_for(n), kThreads, 0, ctx.stream>>>(n, calc, f);
  MINIDL_CUDA_KERNEL_LAUNCH_CHECK(op);
}

}  // namespace minidl::cuda_kernels
