// CUDA kernels of pad (ops/pad.h's kernel interface): forward is a thread per
// output element reading its source (or the value); backward a thread per
// input element summing dy over every output that read it (the inverse maps
// of ops/cuda/pad_math.h), so reflect/replicate/circular need no atomics and
// sum in a fixed order. Both compute their indices from the sizes, pads and
// mode passed by value (PadMaps): nothing is uploaded, so they can be
// captured in a CUDA graph. float16/bfloat16: the backward sums in float,
// rounded once (ops/cuda/opmath.h); the forward only moves values.
// Checked against the CPU kernels on an H100 with the earlier uploaded index
// tables: float32/float64 (tests/test_cuda_ops, 2026-11-26), float16/bfloat16
// (constant, reflect: tests/test_cuda_ops_half, 2026-11-27). The per-thread
// index math is tested on the CPU (tests/test_cuda_pad_upsample_math.cpp);
// the kernels since passed both suites and a CUDA-graph capture
// (tests/test_cuda_graph) in the third H100 run (2026-11-27 18:39).
#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/cuda/pad_math.h"
#include "minidl/ops/pad.h"

namespace minidl {

namespace {

using cuda_kernels::LaunchContext;
using cuda_kernels::linear;
using cuda_math::Offsets;
using cuda_math::PadMaps;

PadMaps maps_of(const PadGeometry& g, const char* op) {
  PadMaps maps;
  MINIDL_CHECK(cuda_math::make_pad_maps(g.in_sizes, g.out_sizes, g.left, static_cast<int>(g.mode), maps), op,
               ": CUDA kernels pad at most ", cuda_math::kMaxPadDims, " dims, got ", g.in_sizes.size());
  return maps;
}

template <class T>
struct PadForward {
  const T* x;
  T* y;
  PadMaps maps;
  T value;
  __device__ void operator()(const Offsets<1>& off) const {
    const int64_t o = off.v[0], n = o / maps.out_plane;
    const int64_t s = maps.source_offset(o % maps.out_plane);
    y[o] = s < 0 ? value : x[n * maps.in_plane + s];
  }
};

template <class T>
struct PadBackward {
  const T* dy;
  T* dx;
  PadMaps maps;
  __device__ void operator()(const Offsets<1>& off) const {
    const int64_t e = off.v[0], n = e / maps.in_plane;
    const T* dyn = dy + n * maps.out_plane;
    cuda_math::opmath_t<T> acc = 0;
    maps.for_each_reader(e % maps.in_plane, [&](int64_t o) { acc += cuda_math::to_opmath(dyn[o]); });
    dx[e] = cuda_math::from_opmath<T>(acc);
  }
};

void pad_forward_cuda(const PadGeometry& g, const Tensor& x, const Tensor& y) {
  if (y.numel() == 0) return;
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(x.dtype(), "pad", [&] {
    const LaunchContext ctx(y.device());
    const PadMaps maps = maps_of(g, "pad");
    const int64_t n = y.numel();
    cuda_kernels::launch_elementwise(
        ctx, n, linear(n, "pad"),
        PadForward<scalar_t>{x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), maps, convert<scalar_t>(g.value)},
        "pad");
  });
}

void pad_backward_cuda(const PadGeometry& g, const Tensor& dy, const Tensor& dx) {
  if (dx.numel() == 0) return;
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(dy.dtype(), "pad_backward", [&] {
    const LaunchContext ctx(dx.device());
    const PadMaps maps = maps_of(g, "pad_backward");
    const int64_t n = dx.numel();
    cuda_kernels::launch_elementwise(
        ctx, n, linear(n, "pad_backward"),
        PadBackward<scalar_t>{dy.data_ptr<scalar_t>(), dx.data_ptr<scalar_t>(), maps}, "pad_backward");
  });
}

}  // namespace

void register_pad_cuda_kernels() {
  pad_forward_stub.set(DeviceType::CUDA, pad_forward_cuda);
  pad_backward_stub.set(DeviceType::CUDA, pad_backward_cuda);
}

}  // namespace minidl
