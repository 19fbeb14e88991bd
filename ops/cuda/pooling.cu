// CUDA kernels of 2-D and 3-D pooling (ops/pooling.h's kernel interface):
// max and avg, window or adaptive, forward and backward (2-D window max
// pools whose indices fit 31 bits: ops/cuda/pool2d_kernels.h, 32-bit
// arithmetic, compiled, not yet run on a GPU). Forward is a thread
// per output walking its window; backward is a thread per input element
// gathering from the outputs whose window holds it (pool_math.h's
// outputs_touching), so overlapping windows need no atomics and the sums run
// in a fixed order (deterministic, which PyTorch's atomic adaptive-pool
// backward is not); max pooling with disjoint windows scatters instead
// (MaxPoolScatter). Global average pooling (adaptive, 1 output per plane)
// reduces each plane with the CUB row reducer. Channels-last tensors
// (g.channels_last = C) run the same kernels with elements C apart and
// threads over memory order (neighbouring threads: neighbouring channels,
// coalesced), global averages included. The per-thread functors are in
// ops/cuda/pool_kernels.h (window math in pool_math.h), which the CPU tests
// run over every index against the CPU kernels. float16/bfloat16: compares and sums in float
// (window averages in double, as float32), rounded once on store
// (ops/cuda/opmath.h), as the CPU kernels through Float32Compute.
// Checked against the CPU kernels on an H100: float32/float64
// (tests/test_cuda_ops, 2026-11-26), float16/bfloat16 (test_cuda_ops_half,
// 2026-11-27, MaxPoolScatter included); the max-pool backward kernels' plane
// split through cuda_math::quotient passed both in the third H100 run
// (2026-11-27 18:39).
#include <algorithm>

#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/cuda/pool2d_kernels.h"
#include "minidl/ops/cuda/pool_kernels.h"
#include "minidl/ops/cuda/row_reduce.cuh"
#include "minidl/ops/pooling.h"

namespace minidl {

namespace {

namespace pool2d = cuda_kernels::pool2d;

using cuda_kernels::LaunchContext;
using cuda_kernels::linear;
using cuda_math::Offsets;
using namespace cuda_kernels::pool;  // the kernels' per-thread functors (ops/cuda/pool_kernels.h)

// Global average pooling: one plane per row.
template <class T>
struct PlaneLoader {
  const T* x;
  int64_t in_plane;
  using Row = int64_t;
  __device__ Row row(int64_t p) const { return p * in_plane; }
  __device__ double operator()(Row start, int64_t j) const { return convert<double>(x[start + j]); }
};

template <class T>
struct PlaneMeanStore {
  T* y;
  double n;
  __device__ void operator()(int64_t p, int64_t, double s) const { y[p] = convert<T>(s / n); }
};

template <class T>
struct PlaneMeanBackward {
  const T* gy;
  T* gx;
  int64_t in_plane;
  __device__ void operator()(const Offsets<1>& off) const {
    const int64_t e = off.v[0];
    gx[e] = convert<T>(convert<double>(gy[e / in_plane]) / static_cast<double>(in_plane));
  }
};

// Planar global average pooling (channels-last goes through the window kernels: threads over channels).
bool is_global_average(const PoolGeometry& g) { return g.adaptive && g.out_plane() == 1 && g.channels_last == 0; }

void max_pool_forward_cuda(const Tensor& x, const Tensor& y, const Tensor& indices, const PoolGeometry& g) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(x.dtype(), "max_pool", [&] {
    const LaunchContext ctx(x.device());
    const int64_t n = g.planes * g.out_plane();
    if (const std::optional<pool2d::Pool2d> p = pool2d::fast_geometry(g)) {
      cuda_kernels::launch_elementwise(ctx, n, linear(n, "max_pool"),
                                       pool2d::MaxPool2dForward<scalar_t>{x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                                                                          indices.data_ptr<int64_t>(), *p},
                                       "max_pool");
      return;
    }
    cuda_kernels::launch_elementwise(ctx, n, linear(n, "max_pool"),
                                     MaxPoolForward<scalar_t>{x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                                                              indices.data_ptr<int64_t>(), device_geometry(g)},
                                     "max_pool");
  });
}

void max_pool_backward_cuda(const Tensor& grad_y, const Tensor& indices, const Tensor& grad_x, const PoolGeometry& g) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(grad_x.dtype(), "max_pool_backward", [&] {
    const LaunchContext ctx(grad_x.device());
    const Pool3 geometry = device_geometry(g);
    if (windows_disjoint(geometry)) {
      MINIDL_CUDA_CHECK_OP(cudaMemsetAsync(grad_x.raw_data(), 0, grad_x.nbytes(), ctx.stream), "max_pool_backward");
      const int64_t n = g.planes * g.out_plane();
      cuda_kernels::launch_elementwise(ctx, n, linear(n, "max_pool_backward"),
                                       MaxPoolScatter<scalar_t>{grad_y.data_ptr<scalar_t>(), indices.data_ptr<int64_t>(),
                                                                grad_x.data_ptr<scalar_t>(), geometry},
                                       "max_pool_backward");
      return;
    }
    const int64_t n = g.planes * g.in_plane();
    if (const std::optional<pool2d::Pool2d> p = pool2d::fast_geometry(g)) {
      cuda_kernels::launch_elementwise(ctx, n, linear(n, "max_pool_backward"),
                                       pool2d::MaxPool2dBackward<scalar_t>{grad_y.data_ptr<scalar_t>(),
                                                                           indices.data_ptr<int64_t>(),
                                                                           grad_x.data_ptr<scalar_t>(), *p},
                                       "max_pool_backward");
      return;
    }
    cuda_kernels::launch_elementwise(ctx, n, linear(n, "max_pool_backward"),
                                     MaxPoolBackward<scalar_t>{grad_y.data_ptr<scalar_t>(), indices.data_ptr<int64_t>(),
                                                               grad_x.data_ptr<scalar_t>(), geometry},
                                     "max_pool_backward");
  });
}

void avg_pool_forward_cuda(const Tensor& x, const Tensor& y, const PoolGeometry& g) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(x.dtype(), "avg_pool", [&] {
    const LaunchContext ctx(x.device());
    if (is_global_average(g)) {
      cuda_kernels::launch_row_reduce(ctx, g.planes, g.in_plane(), 0.0,
                                      PlaneLoader<scalar_t>{x.data_ptr<scalar_t>(), g.in_plane()},
                                      cuda_kernels::SumOp<double>(),
                                      PlaneMeanStore<scalar_t>{y.data_ptr<scalar_t>(), static_cast<double>(g.in_plane())},
                                      "avg_pool");
      return;
    }
    const int64_t n = g.planes * g.out_plane();
    cuda_kernels::launch_elementwise(
        ctx, n, linear(n, "avg_pool"),
        AvgPoolForward<scalar_t>{x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), device_geometry(g)}, "avg_pool");
  });
}

void avg_pool_backward_cuda(const Tensor& grad_y, const Tensor& grad_x, const PoolGeometry& g) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(grad_x.dtype(), "avg_pool_backward", [&] {
    const LaunchContext ctx(grad_x.device());
    const int64_t n = g.planes * g.in_plane();
    if (is_global_average(g)) {
      cuda_kernels::launch_elementwise(
          ctx, n, linear(n, "avg_pool_backward"),
          PlaneMeanBackward<scalar_t>{grad_y.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(), g.in_plane()},
          "avg_pool_backward");
      return;
    }
    cuda_kernels::launch_elementwise(
        ctx, n, linear(n, "avg_pool_backward"),
        AvgPoolBackward<scalar_t>{grad_y.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(), device_geometry(g)},
        "avg_pool_backward");
  });
}

}  // namespace

void register_pooling_cuda_kernels() {
  max_pool_forward_stub.set(DeviceType::CUDA, max_pool_forward_cuda);
  max_pool_backward_stub.set(DeviceType::CUDA, max_pool_backward_cuda);
  avg_pool_forward_stub.set(DeviceType::CUDA, avg_pool_forward_cuda);
  avg_pool_backward_stub.set(DeviceType::CUDA, avg_pool_backward_cuda);
}

}  // namespace minidl
