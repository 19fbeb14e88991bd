// CUDA kernels of interpolate (ops/interpolate.h's kernel interface):
// forward is a thread per output computing its taps (ops/cuda/upsample_math.h,
// PyTorch's formulas, shared with the CPU tests); backward is a thread per
// input element gathering from the outputs that read it through per-dim
// reader lists built on the host and uploaded once per call, so it needs no
// atomics and sums in a fixed order (PyTorch's CUDA backward uses atomicAdd).
// float16/bfloat16: taps, weights and sums in float, rounded once
// (ops/cuda/opmath.h), as the CPU kernel through Float32Compute.
// Checked against the CPU kernels on an H100: float32/float64 (tests/test_cuda_ops,
// 2026-11-26), float16/bfloat16 (bilinear, nearest: tests/test_cuda_ops_half, 2026-11-27).
#include <cstring>
#include <vector>

#include "minidl/ops/cuda/launch.cuh"
#include "minidl/ops/cuda/upload.cuh"
#include "minidl/ops/cuda/upsample_math.h"
#include "minidl/ops/interpolate.h"

namespace minidl {

namespace {

using cuda_kernels::LaunchContext;
using cuda_kernels::linear;
using cuda_math::Offsets;
using cuda_math::UpsampleDim;
using cuda_math::UpsampleReader;
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

// Reader lists of the three dims on the device (T: the compute type).
template <class T>
struct Readers3 {
  const int64_t* start[3];
  const UpsampleReader<T>* list[3];
};

template <class T>
struct UpsampleBackward {
  const T* gy;
  T* gx;
  Dims3 g;
  Readers3<opmath_t<T>> r;
  __device__ void operator()(const Offsets<1>& off) const {
    const int64_t e = off.v[0], p = e / g.in_plane;
    int64_t rest = e % g.in_plane;
    const int64_t jw = rest % g.d[2].in;
    rest /= g.d[2].in;
    const int64_t jh = rest % g.d[1].in, jd = rest / g.d[1].in;
    const T* gyp = gy + p * g.out_plane;
    using C = opmath_t<T>;
    C acc = C(0);
    for (int64_t a = r.start[0][jd]; a < r.start[0][jd + 1]; ++a)
      for (int64_t b = r.start[1][jh]; b < r.start[1][jh + 1]; ++b) {
        const C wdh = r.list[0][a].w * r.list[1][b].w;
        const int64_t row = (r.list[0][a].o * g.d[1].out + r.list[1][b].o) * g.d[2].out;
        for (int64_t c = r.start[2][jw]; c < r.start[2][jw + 1]; ++c)
          acc += r.list[2][c].w * (wdh * to_opmath(gyp[row + r.list[2][c].o]));
      }
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
  using C = opmath_t<T>;
  const int64_t n = g.planes * g.in_plane();
  if (n == 0) return;
  const LaunchContext ctx(grad_x.device());
  const Dims3 dims = dims_of(g);
  // Pack starts (int64) and readers of the three dims into one 8-byte aligned buffer.
  std::vector<unsigned char> bytes;
  size_t start_at[3], list_at[3];
  auto append = [&](const void* data, size_t size) {
    const size_t at = bytes.size();
    bytes.resize(at + ((size + 7) & ~size_t(7)));
    if (size > 0) std::memcpy(bytes.data() + at, data, size);
    return at;
  };
  for (int i = 0; i < 3; ++i) {
    std::vector<int64_t> start;
    std::vector<UpsampleReader<C>> list;
    cuda_math::upsample_readers<C>(dims.d[i], start, list);
    start_at[i] = append(start.data(), start.size() * sizeof(int64_t));
    list_at[i] = append(list.data(), list.size() * sizeof(UpsampleReader<C>));
  }
  // bytes dies on return, maybe before the copy has run: upload_to_device copies it.
  Tensor storage =
      cuda_kernels::upload_to_device(bytes.data(), static_cast<int64_t>(bytes.size()), ctx, "upsample_backward");
  const auto* base = static_cast<const unsigned char*>(storage.raw_data());
  Readers3<C> readers;
  for (int i = 0; i < 3; ++i) {
    readers.start[i] = reinterpret_cast<const int64_t*>(base + start_at[i]);
    readers.list[i] = reinterpret_cast<const UpsampleReader<C>*>(base + list_at[i]);
  }
  cuda_kernels::launch_elementwise(ctx, n, linear(n, "upsample_backward"),
                                   UpsampleBackward<T>{grad_y.data_ptr<T>(), grad_x.data_ptr<T>(), dims, readers},
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
