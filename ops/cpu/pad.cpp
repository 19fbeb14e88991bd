// pad's CPU kernels: every output row (the last padded dimension) either
// reads one input row through the last dimension's index map or is all
// `value`; backward adds each dy value into the input element it was read
// from. Rows of one outer slice may read the same input row (reflect,
// replicate, circular), so backward threads own whole outer slices.
#include <omp.h>

#include <algorithm>

#include "minidl/core/dtype.h"
#include "minidl/ops/cpu/float32_compute.h"
#include "minidl/ops/pad.h"

namespace minidl {

namespace {

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

// Offset of the input row that output row r (over all padded dimensions but
// the last, row-major) reads, or -1 when some index falls into constant padding.
int64_t source_row(const PadGeometry& g, int64_t r) {
  const size_t m = g.out_sizes.size();
  int64_t offset = 0, stride = 1;
  for (size_t k = m - 1; k-- > 0;) {
    const int64_t i = r % g.out_sizes[k];
    r /= g.out_sizes[k];
    const int64_t s = g.source[k][static_cast<size_t>(i)];
    if (s < 0) return -1;
    offset += s * stride;
    stride *= g.in_sizes[k];
  }
  return offset;
}

int threads_for(int64_t values) {
  if (omp_in_parallel()) return 1;
  return static_cast<int>(std::clamp<int64_t>(values >> 15, 1, omp_get_max_threads()));
}

template <class T>
void pad_forward_kernel(const PadGeometry& g, const T* x, T* y) {
  const int64_t in_w = g.in_sizes.back(), out_w = g.out_sizes.back();
  const int64_t in_plane = product(g.in_sizes), out_plane = product(g.out_sizes);
  const int64_t rows = out_w > 0 ? out_plane / out_w : 0;
  const std::vector<int64_t>& src = g.source.back();
  const T value = static_cast<T>(g.value);
#pragma omp parallel for schedule(static) num_threads(threads_for(g.outer * out_plane))
  for (int64_t o = 0; o < g.outer * rows; ++o) {
    const int64_t n = o / rows, r = o % rows;
    T* dst = y + n * out_plane + r * out_w;
    const int64_t row = source_row(g, r);
    if (row < 0) {
      std::fill(dst, dst + out_w, value);
      continue;
    }
    const T* in = x + n * in_plane + row * in_w;
    for (int64_t j = 0; j < out_w; ++j) {
      const int64_t s = src[static_cast<size_t>(j)];
      dst[j] = s < 0 ? value : in[s];
    }
  }
}

template <class T>
void pad_backward_kernel(const PadGeometry& g, const T* dy, T* dx) {
  const int64_t in_w = g.in_sizes.back(), out_w = g.out_sizes.back();
  const int64_t in_plane = product(g.in_sizes), out_plane = product(g.out_sizes);
  const int64_t rows = out_w > 0 ? out_plane / out_w : 0;
  const std::vector<int64_t>& src = g.source.back();
#pragma omp parallel for schedule(static) num_threads(threads_for(g.outer * (in_plane + out_plane)))
  for (int64_t n = 0; n < g.outer; ++n) {
    T* dx_n = dx + n * in_plane;
    std::fill(dx_n, dx_n + in_plane, T(0));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = source_row(g, r);
      if (row < 0) continue;
      const T* grad = dy + n * out_plane + r * out_w;
      T* dst = dx_n + row * in_w;
      for (int64_t j = 0; j < out_w; ++j) {
        const int64_t s = src[static_cast<size_t>(j)];
        if (s >= 0) dst[s] += grad[j];
      }
    }
  }
}

void pad_forward_cpu(const PadGeometry& g, const Tensor& x, const Tensor& y) {
  if (y.numel() == 0) return;
  MINIDL_DISPATCH_FLOATING(x.dtype(), "pad", [&] {
    pad_forward_kernel<scalar_t>(g, x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>());
  });
}

void pad_backward_cpu(const PadGeometry& g, const Tensor& dy, const Tensor& dx) {
  if (dx.numel() == 0) return;
  MINIDL_DISPATCH_FLOATING(dy.dtype(), "pad_backward", [&] {
    pad_backward_kernel<scalar_t>(g, dy.data_ptr<scalar_t>(), dx.data_ptr<scalar_t>());
  });
}

}  // namespace

void register_pad_cpu_kernels() {
  pad_forward_stub.set(DeviceType::CPU, cpu::Float32Compute<pad_forward_cpu, 2>::run);
  pad_backward_stub.set(DeviceType::CPU, cpu::Float32Compute<pad_backward_cpu, 2>::run);
}

}  // namespace minidl
