// CPU kernels of the copying shape ops (ops/shape_ops.h's kernel interface):
// index_select's gather and its backward's scatter-add, over contiguous
// tensors seen as (outer, size along dim, inner).
#include <algorithm>
#include <array>

#include "minidl/ops/shape_ops.h"

namespace minidl {

namespace {

// Copies slice index[i] of x along dim into slice i of out.
template <class T>
void gather_slices(const T* x, T* out, const int64_t* index, int64_t n_index, int64_t outer, int64_t x_dim,
                   int64_t inner) {
#pragma omp parallel for schedule(static) if (outer * n_index * inner > 32768)
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < n_index; ++i) {
      const T* src = x + (o * x_dim + index[i]) * inner;
      T* dst = out + (o * n_index + i) * inner;
      std::copy(src, src + inner, dst);
    }
  }
}

template <class T>
void scatter_add_slices(const T* grad, T* dx, const int64_t* index, int64_t n_index, int64_t outer,
                        int64_t x_dim, int64_t inner) {
  // Parallel over `outer` only: repeated indices write the same row, so rows of
  // one outer slice stay on one thread.
#pragma omp parallel for schedule(static) if (outer * n_index * inner > 32768)
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < n_index; ++i) {
      const T* src = grad + (o * n_index + i) * inner;
      T* dst = dx + (o * x_dim + index[i]) * inner;
      for (int64_t k = 0; k < inner; ++k) dst[k] += src[k];
    }
  }
}

// (outer, size along dim, inner) of a contiguous tensor.
std::array<int64_t, 3> split_at(const Shape& shape, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  return {outer, shape.empty() ? 1 : shape[dim], inner};
}

void index_select_cpu(const Tensor& x, const Tensor& index, int64_t dim, Tensor& out) {
  // Named, not a structured binding: clang 14 (the fuzz build) cannot capture those in lambdas.
  const std::array<int64_t, 3> split = split_at(x.shape(), dim);
  const int64_t outer = split[0], x_dim = split[1], inner = split[2];
  MINIDL_DISPATCH_ALL(x.dtype(), "index_select", [&] {
    gather_slices(x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), index.data_ptr<int64_t>(), index.numel(),
                  outer, x_dim, inner);
  });
}

void index_add_cpu(const Tensor& grad, const Tensor& index, int64_t dim, Tensor& dx) {
  // Named, not a structured binding: clang 14 (the fuzz build) cannot capture those in lambdas.
  const std::array<int64_t, 3> split = split_at(dx.shape(), dim);
  const int64_t outer = split[0], x_dim = split[1], inner = split[2];
  MINIDL_DISPATCH_FLOATING(grad.dtype(), "index_select_backward", [&] {
    scatter_add_slices(grad.data_ptr<scalar_t>(), dx.data_ptr<scalar_t>(), index.data_ptr<int64_t>(),
                       index.numel(), outer, x_dim, inner);
  });
}

}  // namespace

void register_shape_cpu_kernels() {
  index_select_stub.set(DeviceType::CPU, index_select_cpu);
  index_add_stub.set(DeviceType::CPU, index_add_cpu);
}

}  // namespace minidl
