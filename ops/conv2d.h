// 2-D convolution (cross-correlation, as PyTorch), NCHW.
#pragma once

#include <array>
#include <cstdint>

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl {

struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};

// x: (N, C_in, H, W) or unbatched (C_in, H, W); weight: (C_out, C_in/groups, kH, kW);
// bias: (C_out) or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dParams& params = {});

// ---- kernel interface (a backend registers its kernels here) ----------------

// The sizes of one conv2d call, already validated (ops/conv2d.cpp checks them).
struct Conv2dGeometry {
  int64_t batch = 1;
  int64_t in_channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0, out_h = 0, out_w = 0;
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  // x, w, y (dy, dx, dw) laid out NHWC (core/memory_format.h), set by the op
  // for a channels-last 4-D input or weight; the CUDA kernels compute in it, the CPU
  // ones through NCHW copies.
  bool channels_last = false;
};

// out_h/out_w from the other fields (PyTorch's formula).
void conv2d_set_output_size(Conv2dGeometry& g);

// x, w, bias (or undefined), y: contiguous NCHW / (K, C/groups, kH, kW) / (K),
// or with g.channels_last x, w, y (and dy, dx, dw) channels-last.
using Conv2dForwardFn = void(const Conv2dGeometry&, const Tensor& x, const Tensor& w, const Tensor& bias,
                             const Tensor& y);
// dx, dw, dbias: the grads wanted (undefined when not).
using Conv2dBackwardFn = void(const Conv2dGeometry&, const Tensor& x, const Tensor& w, const Tensor& dy,
                              const Tensor& dx, const Tensor& dw, const Tensor& dbias);

extern DispatchStub<Conv2dForwardFn> conv2d_forward_stub;
extern DispatchStub<Conv2dBackwardFn> conv2d_backward_stub;

// For kernels that compute NCHW only (the CPU's, cuDNN's float64): a
// channels-last call (g.channels_last) runs `nchw` on contiguous copies and
// writes the results back into the NHWC outputs; any other call goes straight
// through.
void conv2d_forward_nchw_copies(Conv2dForwardFn* nchw, const Conv2dGeometry& g, const Tensor& x, const Tensor& w,
                                const Tensor& bias, const Tensor& y);
void conv2d_backward_nchw_copies(Conv2dBackwardFn* nchw, const Conv2dGeometry& g, const Tensor& x, const Tensor& w,
                                 const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& dbias);
template <Conv2dForwardFn* kNchw>
void conv2d_forward_through_nchw(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                                 const Tensor& y) {
  conv2d_forward_nchw_copies(kNchw, g, x, w, bias, y);
}
template <Conv2dBackwardFn* kNchw>
void conv2d_backward_through_nchw(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                                  const Tensor& dx, const Tensor& dw, const Tensor& dbias) {
  conv2d_backward_nchw_copies(kNchw, g, x, w, dy, dx, dw, dbias);
}
void register_conv2d_cpu_kernels();

}  // namespace minidl
