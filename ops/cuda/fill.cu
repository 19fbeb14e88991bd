// fill_ on CUDA (ops/binary.h's fill_stub): out[i] = value for every element
// of a view of any strides and any of the six dtypes. The value is converted
// on the host with minidl::convert (the CPU kernel's conversion: float16 and
// bfloat16 round to nearest even through float32; fill_ has already refused
// an overflowing or non-integral value) and passed as a kernel argument, so
// no host tensor is made or copied. Runs on the current stream, asynchronously.
#include "minidl/core/cuda/runtime.h"
#include "minidl/core/dtype.h"
#include "minidl/ops/binary.h"
#include "minidl/ops/cuda/strided_index.h"
#include "minidl/ops/cuda/tensor_geometry.h"

namespace minidl {

namespace {

using cuda_detail::StridedIndex;

template <class T>
__global__ void fill_kernel(T* out, StridedIndex oi, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[oi.offset(i)] = value;
}

void fill_cuda(const Tensor& out, double value) {
  const int64_t n = out.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(out.device());
  const cudaStream_t stream = cuda::current_stream(out.device().index);
  const StridedIndex oi = cuda_detail::strided_index(out, "fill_");
  MINIDL_DISPATCH_ALL_AND_HALF(out.dtype(), "fill_", [&] {
    using T = scalar_t;
    const T v = convert<T>(value);
    fill_kernel<T><<<cuda_detail::blocks_for(n), cuda_detail::kThreadsPerBlock, 0, stream>>>(
        static_cast<T*>(out.raw_data()), oi, v, n);
    MINIDL_CUDA_KERNEL_LAUNCH_CHECK("fill_");
  });
}

}  // namespace

void register_fill_cuda_kernels() { fill_stub.set(DeviceType::CUDA, fill_cuda); }

}  // namespace minidl
