// CUDA kernels of interpolate (ops/interpolate.h's kernel interface):
// forward is a thread per output computing its taps (ops/cuda/upsample_math.h,
// PyTorch's formulas, shared with the CPU tests); backward is a thread per
// input element gathering from the outputs that read it, found per dim by a
// binary search over the same taps (for_each_upsample_reader), so it needs no
// atomics, sums in a fixed order (PyTorch's CUDA backward uses atomicAdd) and
// uploads nothing: both can be captured in a CUDA graph.
// float16/bfloat16: taps, weights and sums in float, rounded once
// (ops/cuda/opmath.h), as the CPU kernel through Float32Compute.
// Checked against the CPU kernels on an H100 with the earlier uploaded reader
// lists: float32/float64 (tests/test_cuda_ops, 2026-11-26), float16/bfloat16
// (bilinear, nearest: tests/test_cuda_ops_half, 2026-11-27). The searched
// readers equal those lists bit for bit on the CPU
// (tests/test_cuda_pad_upsample_math.cpp); the kernel since passed both
// suites and a CUDA-graph capture in the third H100 run (2026-11-27 18:39).
#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/cuda/upsample_math.h"
#include "minidl/ops/interpolate.h"

namespace minidl {

namespace {

using cuda_kernels::LaunchContext;
using cuda_kernels::linear;
using cuda_math::Offsets;
using cuda_math::UpsampleDim;
using cuda_math::UpsampleReaderSpan;
using cuda_math::UpsampleTap;
using cuda_math::opmath_t;
using cuda_math::from_opmath;
using cuda_math::to_opmath;

struct Dims3 {
  UpsampleDim d[3];
  int64_t in_plane, out_plane;
};

Dims3 dims_of(const UpsampleGeometry& g) {
  Dims3 r;
  for (int i = 0; i < 3; ++i)
    r.d[i] = UpsampleDim{g.in[i], g.out[i], g.scales[i], static_cast<int>(g.mode), g.align_corners};
  r.in_plane = g.in_plane();
  r.out_plane = g.out_plane();
  return r;
}

template <class T>
struct UpsampleForward {
  const T* x;
  T* y;
  Dims3 g;
  __device__ void operator()(const Offsets<1>& off) const {
    const int64_t o = off.v[0], p = o / g.out_plane;
    int64_t r = o % g.out_plane;
    const int64_t ow = r % g.d[2].out;
    r /= g.d[2].out;
    const int64_t oh = r % g.d[1].out, od = r / g.d[1].out;
    using C = opmath_t<T>;
    const UpsampleTap<C> td = cuda_math::upsample_tap<C>(g.d[0], od), th = cuda_math::upsample_tap<C>(g.d[1], oh),
                         tw = cuda_math::upsample_tap<C>(g.d[2], ow);
    const int64_t H = g.d[1].in, W = g.d[2].in;
    const T* xp = x + p * g.in_plane;
    if (g.d[2].mode != 2) {  // nearest: a plain read (no 0 * inf)
      y[o] = xp[(td.i0 * H + th.i0) * W + tw.i0];
      return;
    }
    C s = 0;
    for (int a = 0; a < 2; ++a) {
      const C wd = a ? td.l1 : td.l0;
      if (wd == C(0)) continue;
      for (int b = 0; b < 2; ++b) {
        const C wh = b ? th.l1 : th.l0;
        if (wh == C(0)) continue;
        const T* row = xp + ((a ? td.i1 : td.i0) * H + (b ? th.i1 : th.i0)) * W;
        s += (wd * wh) * (tw.l0 * to_opmath(row[tw.i0]) + tw.l1 * to_opmath(row[tw.i1]));
      }
    }
    y[o] = from_opmath<T>(s);
  }
};

template <class T>
struct UpsampleBackward {
  const T* gy;
  T* gx;
  Dims3 g;
  __device__ void operator()(const Offsets<1>& off) const {
    const int64_t e = off.v[0], p = e / g.in_plane;
    int64_t rest = e % g.in_plane;
    const int64_t jw = rest % g.d[2].in;
    rest /= g.d[2].in;
    const int64_t jh = rest % g.d[1].in, jd = rest / g.d[1].in;
    const T* gyp = gy + p * g.out_plane;
    using C = opmath_t<T>;
    // The W span is searched once, not once per (D, H) reader.
    const UpsampleReaderSpan sw = cuda_math::upsample_reader_span<C>(g.d[2], jw);
    C acc = C(0);
    cuda_math::for_each_upsample_reader<C>(g.d[0], jd, [&](int64_t od, C wd) {
      cuda_math::for_each_upsample_reader<C>(g.d[1], jh, [&](int64_t oh, C wh) {
        const C wdh = wd * wh;
        const int64_t row = (od * g.d[1].out + oh) * g.d[2].out;
        cuda_math::for_each_upsample_reader<C>(g.d[2], jw, sw, [&](int64_t ow, C ww) {
          acc += ww * (wdh * to_opmath(gyp[row + ow]));
        });
      });
    });
    gx[e] = from_opmath<T>(acc);
  }
};

void upsample_forward_cuda(const Tensor& x, const Tensor& y, const UpsampleGeometry& g) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(x.dtype(), "upsample", [&] {
    const LaunchContext ctx(x.device());
    const int64_t n = g.planes * g.out_plane();
    cuda_kernels::launch_elementwise(
        ctx, n, linear(n, "upsample"),
        UpsampleForward<scalar_t>{x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), dims_of(g)}, "upsample");
  });
}

template <class T>
void upsample_backward_typed(const Tensor& grad_y, const Tensor& grad_x, const UpsampleGeometry& g) {
  const int64_t n = g.planes * g.in_plane();
  if (n == 0) return;
  const LaunchContext ctx(grad_x.device());
  cuda_kernels::launch_elementwise(ctx, n, linear(n, "upsample_backward"),
                                   UpsampleBackward<T>{grad_y.data_ptr<T>(), grad_x.data_ptr<T>(), dims_of(g)},
                                   "upsample_backward");
}

void upsample_backward_cuda(const Tensor& grad_y, const Tensor& grad_x, const UpsampleGeometry& g) {
  MINIDL_CUDA_DISPATCH_FLOATING_AND_HALF(grad_x.dtype(), "upsample_backward",
                                         [&] { upsample_backward_typed<scalar_t>(grad_y, grad_x, g); });
}

}  // namespace

void register_interpolate_cuda_kernels() {
  upsample_forward_stub.set(DeviceType::CUDA, upsample_forward_cuda);
  upsample_backward_stub.set(DeviceType::CUDA, upsample_backward_cuda);
}

}  // namespace minidl
