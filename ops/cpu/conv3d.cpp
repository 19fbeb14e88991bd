// conv3d's CPU kernels: conv2d's kernels (ops/cpu/conv2d_kernels.h, with their
// shifted-plane, im2col and Winograd paths) applied to depth slices.
//
// Output depth od reads input depths id = od*sd - pd + kd*dd, kd < kD. Stack
// those kD input slices of every channel as the channels of one 2-D image,
// channel c*kD + kd (zero where id falls into the depth padding): then
//     y[n][:, od] = conv2d(slices, w viewed as (K, Cg*kD, kH, kW))
// because w's (c, kd) index is already c*kD + kd in memory, and with groups
// the Cg*kD stacked channels of group g are exactly the ones its weights read.
// A chunk of output depths goes to conv2d as its batch, so one conv2d call
// does many images and its own cost rule picks the path. Only that chunk of
// stacked slices exists at a time (a whole-tensor vol2col of a UNet level
// would be hundreds of MB); the copy costs kD reads of x per output, small
// next to the GEMM's K*Cg*kD*kH*kW products per pixel.
//   grad input:  conv2d's grad input gives d(slices); each slice is added back
//                into the dx depth it was copied from (the adjoint of the copy)
//   grad weight: conv2d's grad weight of each chunk, summed over chunks
//   grad bias:   the sum of dy over everything but channels
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "minidl/core/dtype.h"
#include "minidl/ops/conv3d.h"
#include "minidl/ops/cpu/conv2d_gemm.h"
#include "minidl/ops/cpu/conv2d_kernels.h"
#include "minidl/ops/cpu/conv3d_kernels.h"

namespace minidl {

namespace {

// Scratch per thread (conv2d's thread_buffer slots are in use by the conv2d
// calls made in between, so these are separate).
template <class T>
struct Scratch {
  conv2d_gemm::Buffer<T> slices, planes, weights;
};
template <class T>
Scratch<T>& scratch() {
  thread_local Scratch<T> s;
  return s;
}

// Stacked input slices and per-depth output planes of one chunk: bytes
// budget that keeps them (with conv2d's own scratch) in the last-level cache's range.
constexpr int64_t kChunkBytes = int64_t{8} << 20;

// Threads for a copy of `values` elements: waking the others costs more than
// copying a few hundred KB.
int copy_threads(int64_t values) {
  if (omp_in_parallel()) return 1;
  return static_cast<int>(std::clamp<int64_t>(values >> 16, 1, omp_get_max_threads()));
}

// The 2-D problem of a chunk of `chunk` output depths.
Conv2dGeometry slice_geometry(const Conv3dGeometry& g, int64_t chunk) {
  Conv2dGeometry s = g.hw;
  s.batch = chunk;
  s.in_channels = g.hw.in_channels * g.kernel_d;
  return s;
}

int64_t input_depth(const Conv3dGeometry& g, int64_t od, int64_t kd) { return od * g.stride_d - g.pad_d + kd * g.dilation_d; }

// slices[b][c*kD + kd] = x_n[c][input_depth(od0 + b, kd)] (0 in the padding).
template <class T>
void gather_input(const Conv3dGeometry& g, const T* x_n, int64_t od0, int64_t chunk, T* slices) {
  const int64_t C = g.hw.in_channels, kD = g.kernel_d, HW = g.hw.in_h * g.hw.in_w;
#pragma omp parallel for collapse(2) schedule(static) num_threads(copy_threads(chunk * C * kD * HW))
  for (int64_t b = 0; b < chunk; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t kd = 0; kd < kD; ++kd) {
        T* dst = slices + ((b * C + c) * kD + kd) * HW;
        const int64_t id = input_depth(g, od0 + b, kd);
        if (id < 0 || id >= g.in_d)
          std::fill(dst, dst + HW, T(0));
        else
          std::memcpy(dst, x_n + (c * g.in_d + id) * HW, static_cast<size_t>(HW) * sizeof(T));
      }
}

// The adjoint of gather_input: dx_n[c][id] += dslices[b][c*kD + kd].
// Each thread owns whole channels, so no two add into one value.
template <class T>
void scatter_add_input(const Conv3dGeometry& g, const T* dslices, int64_t od0, int64_t chunk, T* dx_n) {
  const int64_t C = g.hw.in_channels, kD = g.kernel_d, HW = g.hw.in_h * g.hw.in_w;
#pragma omp parallel for schedule(static) num_threads(copy_threads(chunk * C * kD * HW))
  for (int64_t c = 0; c < C; ++c)
    for (int64_t b = 0; b < chunk; ++b)
      for (int64_t kd = 0; kd < kD; ++kd) {
        const int64_t id = input_depth(g, od0 + b, kd);
        if (id < 0 || id >= g.in_d) continue;
        const T* src = dslices + ((b * C + c) * kD + kd) * HW;
        T* dst = dx_n + (c * g.in_d + id) * HW;
        for (int64_t i = 0; i < HW; ++i) dst[i] += src[i];
      }
}

// Between y_n[k][od0 + b] (NCDHW) and planes[b][k] (conv2d's NCHW batch).
template <class T>
void copy_output_planes(const Conv3dGeometry& g, int64_t od0, int64_t chunk, const T* from, T* to, bool to_planes) {
  const int64_t K = g.hw.out_channels, OHW = g.hw.out_h * g.hw.out_w;
#pragma omp parallel for collapse(2) schedule(static) num_threads(copy_threads(chunk * K * OHW))
  for (int64_t b = 0; b < chunk; ++b)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t plane = (b * K + k) * OHW, volume = (k * g.out_d + od0 + b) * OHW;
      std::memcpy(to + (to_planes ? plane : volume), from + (to_planes ? volume : plane),
                  static_cast<size_t>(OHW) * sizeof(T));
    }
}

// Calls f(n, od0, chunk, slice geometry) for every chunk of output depths of every image.
template <class F>
void for_each_chunk(const Conv3dGeometry& g, int64_t element_size, F f) {
  const int64_t step = conv3d_depth_chunk(g, element_size);
  for (int64_t n = 0; n < g.hw.batch; ++n)
    for (int64_t od0 = 0; od0 < g.out_d; od0 += step) {
      const int64_t chunk = std::min(step, g.out_d - od0);
      f(n, od0, chunk, slice_geometry(g, chunk));
    }
}

template <class T>
void bias_grad(const Conv3dGeometry& g, const T* dy, T* dbias) {
  const int64_t K = g.hw.out_channels, per_image = g.out_d * g.hw.out_h * g.hw.out_w;
#pragma omp parallel for schedule(static) num_threads(copy_threads(g.hw.batch * K * per_image))
  for (int64_t k = 0; k < K; ++k) {
    double sum = 0;  // float32 sums over batch * voxels lose bits in float
    for (int64_t n = 0; n < g.hw.batch; ++n) {
      const T* src = dy + (n * K + k) * per_image;
      T s = 0;
      for (int64_t i = 0; i < per_image; ++i) s += src[i];
      sum += s;
    }
    dbias[k] = static_cast<T>(sum);
  }
}

}  // namespace

int64_t conv3d_depth_chunk(const Conv3dGeometry& g, int64_t element_size) {
  const int64_t per_depth = std::max(g.hw.in_channels * g.kernel_d * g.hw.in_h * g.hw.in_w,
                                     g.hw.out_channels * g.hw.out_h * g.hw.out_w) *
                            element_size;
  int64_t chunk = std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(per_depth, 1), 1, g.out_d);
  // Whole rounds of images for conv2d's threads (it spreads the batch over them).
  const int64_t threads = omp_get_max_threads();
  if (chunk > threads && chunk < g.out_d) chunk = chunk / threads * threads;
  return chunk;
}

template <class T>
void conv3d_forward_kernel(const Conv3dGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  const int64_t in_volume = g.hw.in_channels * g.in_d * g.hw.in_h * g.hw.in_w;
  const int64_t out_volume = g.hw.out_channels * g.out_d * g.hw.out_h * g.hw.out_w;
  const int64_t step = conv3d_depth_chunk(g, sizeof(T));
  T* slices = scratch<T>().slices.get(step * g.hw.in_channels * g.kernel_d * g.hw.in_h * g.hw.in_w);
  T* planes = scratch<T>().planes.get(step * g.hw.out_channels * g.hw.out_h * g.hw.out_w);
  for_each_chunk(g, sizeof(T), [&](int64_t n, int64_t od0, int64_t chunk, const Conv2dGeometry& s) {
    gather_input(g, x + n * in_volume, od0, chunk, slices);
    conv2d_forward_kernel(s, slices, w, bias, planes);
    copy_output_planes(g, od0, chunk, planes, y + n * out_volume, false);
  });
}

template <class T>
void conv3d_backward_input_kernel(const Conv3dGeometry& g, const T* dy, const T* w, T* dx) {
  const int64_t in_volume = g.hw.in_channels * g.in_d * g.hw.in_h * g.hw.in_w;
  const int64_t out_volume = g.hw.out_channels * g.out_d * g.hw.out_h * g.hw.out_w;
  const int64_t step = conv3d_depth_chunk(g, sizeof(T));
  T* slices = scratch<T>().slices.get(step * g.hw.in_channels * g.kernel_d * g.hw.in_h * g.hw.in_w);
  T* planes = scratch<T>().planes.get(step * g.hw.out_channels * g.hw.out_h * g.hw.out_w);
  std::fill(dx, dx + g.hw.batch * in_volume, T(0));
  for_each_chunk(g, sizeof(T), [&](int64_t n, int64_t od0, int64_t chunk, const Conv2dGeometry& s) {
    copy_output_planes(g, od0, chunk, dy + n * out_volume, planes, true);
    conv2d_backward_input_kernel(s, planes, w, slices);
    scatter_add_input(g, slices, od0, chunk, dx + n * in_volume);
  });
}

template <class T>
void conv3d_backward_weight_kernel(const Conv3dGeometry& g, const T* dy, const T* x, T* dw, T* dbias) {
  if (dbias) bias_grad(g, dy, dbias);
  if (!dw) return;
  const int64_t in_volume = g.hw.in_channels * g.in_d * g.hw.in_h * g.hw.in_w;
  const int64_t out_volume = g.hw.out_channels * g.out_d * g.hw.out_h * g.hw.out_w;
  const int64_t w_size = g.hw.out_channels * (g.hw.in_channels / g.hw.groups) * g.kernel_d * g.hw.kernel_h *
                         g.hw.kernel_w;
  const int64_t step = conv3d_depth_chunk(g, sizeof(T));
  T* slices = scratch<T>().slices.get(step * g.hw.in_channels * g.kernel_d * g.hw.in_h * g.hw.in_w);
  T* planes = scratch<T>().planes.get(step * g.hw.out_channels * g.hw.out_h * g.hw.out_w);
  T* partial = scratch<T>().weights.get(w_size);
  bool first = true;
  for_each_chunk(g, sizeof(T), [&](int64_t n, int64_t od0, int64_t chunk, const Conv2dGeometry& s) {
    gather_input(g, x + n * in_volume, od0, chunk, slices);
    copy_output_planes(g, od0, chunk, dy + n * out_volume, planes, true);
    conv2d_backward_weight_kernel<T>(s, planes, slices, first ? dw : partial, nullptr);
    if (!first)
      for (int64_t i = 0; i < w_size; ++i) dw[i] += partial[i];
    first = false;
  });
  if (first) std::fill(dw, dw + w_size, T(0));  // no chunks: an empty batch
}

#define MINIDL_CONV3D_INSTANTIATE(T)                                                                          \
  template void conv3d_forward_kernel<T>(const Conv3dGeometry&, const T*, const T*, const T*, T*);            \
  template void conv3d_backward_input_kernel<T>(const Conv3dGeometry&, const T*, const T*, T*);               \
  template void conv3d_backward_weight_kernel<T>(const Conv3dGeometry&, const T*, const T*, T*, T*);
MINIDL_CONV3D_INSTANTIATE(float)
MINIDL_CONV3D_INSTANTIATE(double)
#undef MINIDL_CONV3D_INSTANTIATE

namespace {

template <class T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

void conv3d_forward_cpu(const Conv3dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                        const Tensor& y) {
  MINIDL_DISPATCH_FLOATING(x.dtype(), "conv3d", [&] {
    conv3d_forward_kernel<scalar_t>(g, x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), ptr_or_null<scalar_t>(bias),
                                    y.data_ptr<scalar_t>());
  });
}

void conv3d_backward_cpu(const Conv3dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                         const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  MINIDL_DISPATCH_FLOATING(dy.dtype(), "conv3d_backward", [&] {
    if (dx.defined())
      conv3d_backward_input_kernel<scalar_t>(g, dy.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(),
                                             dx.data_ptr<scalar_t>());
    if (dw.defined() || dbias.defined())
      conv3d_backward_weight_kernel<scalar_t>(g, dy.data_ptr<scalar_t>(), ptr_or_null<scalar_t>(x),
                                              ptr_or_null<scalar_t>(dw), ptr_or_null<scalar_t>(dbias));
  });
}

}  // namespace

void register_conv3d_cpu_kernels() {
  conv3d_forward_stub.set(DeviceType::CPU, conv3d_forward_cpu);
  conv3d_backward_stub.set(DeviceType::CPU, conv3d_backward_cpu);
}

}  // namespace minidl
