// CUDA kernels of the copying shape ops (ops/shape_ops.h's kernel
// interface), contiguous tensors seen as (outer, size along dim, inner):
// index_select's gather (a thread per output element) and its backward's
// scatter-add, index_add, without atomics: a thread owns one (outer, inner)
// column of dx and adds grad's slices into it in index order, so repeated
// indices add deterministically, in the CPU kernel's order. An index outside
// [0, size) stops the kernel (__trap, a "device-side assert" that poisons
// the context, as PyTorch's CUDA_KERNEL_ASSERT); the op checks CPU indices on
// the host. float16/bfloat16: index_select copies them (the CPU kernel does
// not take them yet), index_add adds in float, rounded once per add
// (ops/cuda/opmath.h). Checked on an H100: float32/float64/integers against
// the CPU kernels (tests/test_cuda_ops, 2026-11-26); float16/bfloat16
// index_select and its backward against the CPU's float32 results, rounded
// (tests/test_cuda_ops_half, 2026-11-27).
#include <array>

#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/shape_ops.h"

namespace minidl {

namespace {

using cuda_kernels::LaunchContext;
using cuda_kernels::linear;
using cuda_math::Offsets;

std::array<int64_t, 3> split_at(const Shape& shape, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  return {outer, shape.empty() ? 1 : shape[dim], inner};
}


__device__ inline void check_index(int64_t i, int64_t size) {
  if (i < 0 || i >= size) __trap();
}

// out element (o, i, k) = x (o, index[i], k).
template <class T>
struct GatherFunctor {
  T* out;
  const T* x;
  const int64_t* index;
  int64_t n_index, x_dim, inner;
  __device__ void operator()(const Offsets<1>& off) const {
    const int64_t e = off.v[0];
    const int64_t k = e % inner, i = (e / inner) % n_index, o = e / (inner * n_index);
    const int64_t src = index[i];
    check_index(src, x_dim);
    out[e] = x[(o * x_dim + src) * inner + k];
  }
};

// Column (o, k) of dx: dx (o, index[i], k) += grad (o, i, k) for i in order.
template <class T>
struct ScatterAddFunctor {
  T* dx;
  const T* grad;
  const int64_t* index;
  int64_t n_index, x_dim, inner;
  __device__ void operator()(const Offsets<1>& off) const {
    const int64_t c = off.v[0];
    const int64_t k = c % inner, o = c / inner;
    for (int64_t i = 0; i < n_index; ++i) {
      const int64_t dst = index[i];
      check_index(dst, x_dim);
      T& d = dx[(o * x_dim + dst) * inner + k];
      d = cuda_math::from_opmath<T>(cuda_math::to_opmath(d) + cuda_math::to_opmath(grad[(o * n_index + i) * inner + k]));
    }
  }
};

void index_select_cuda(const Tensor& x, const Tensor& index, int64_t dim, Tensor& out) {
  const std::array<int64_t, 3> split = split_at(x.shape(), dim);
  MINIDL_CUDA_DISPATCH_ALL_AND_HALF(x.dtype(), "index_select", [&] {
    const LaunchContext ctx(out.device());
    const int64_t n = out.numel();
    cuda_kernels::launch_elementwise(ctx, n, linear(n, "index_select"),
                                     GatherFunctor<scalar_t>{out.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(),
                                                             index.data_ptr<int64_t>(), index.numel(), split[1],
                                                             split[2]},
                                     "index_select");
  });
}

void index_add_cuda(const Tensor& grad, const Tensor& index, int64_t dim, Tensor& dx) {
  const std::array<int64_t, 3> split = split_at(dx.shape(), dim);
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(grad.dtype(), "index_select_backward", [&] {
    const LaunchContext ctx(dx.device());
    const int64_t columns = split[0] * split[2];
    if (dx.numel() == 0) return;
    cuda_kernels::launch_elementwise(ctx, columns, linear(columns, "index_select_backward"),
                                     ScatterAddFunctor<scalar_t>{dx.data_ptr<scalar_t>(), grad.data_ptr<scalar_t>(),
                                                                 index.data_ptr<int64_t>(), index.numel(), split[1],
                                                                 split[2]},
                                     "index_select_backward");
  });
}

}  // namespace

void register_shape_cuda_kernels() {
  index_select_stub.set(DeviceType::CUDA, index_select_cuda);
  index_add_stub.set(DeviceType::CUDA, index_add_cuda);
}

}  // namespace minidl
