// 3-D convolution (cross-correlation, as PyTorch), NCDHW.
#pragma once

#include <array>
#include <cstdint>

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"
#include "minidl/ops/conv2d.h"

namespace minidl {

struct Conv3dParams {
  std::array<int64_t, 3> stride{1, 1, 1};
  std::array<int64_t, 3> padding{0, 0, 0};
  std::array<int64_t, 3> dilation{1, 1, 1};
  int64_t groups = 1;
};

// x: (N, C_in, D, H, W) or unbatched (C_in, D, H, W); weight: (C_out, C_in/groups, kD, kH, kW);
// bias: (C_out) or undefined.
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv3dParams& params = {});

// ---- kernel interface (a backend registers its kernels here) ----------------

// The sizes of one conv3d call, already validated: the (H, W) part as a
// conv2d geometry (batch, channels, groups included) plus the depth.
struct Conv3dGeometry {
  Conv2dGeometry hw;
  int64_t in_d = 0, out_d = 0, kernel_d = 1, stride_d = 1, pad_d = 0, dilation_d = 1;
};

// out_d/out_h/out_w from the other fields (PyTorch's formula).
void conv3d_set_output_size(Conv3dGeometry& g);

// x, w, bias (or undefined), y: contiguous NCDHW / (K, C/groups, kD, kH, kW) / (K).
using Conv3dForwardFn = void(const Conv3dGeometry&, const Tensor& x, const Tensor& w, const Tensor& bias,
                             const Tensor& y);
// dx, dw, dbias: the grads wanted (undefined when not).
using Conv3dBackwardFn = void(const Conv3dGeometry&, const Tensor& x, const Tensor& w, const Tensor& dy,
                              const Tensor& dx, const Tensor& dw, const Tensor& dbias);

extern DispatchStub<Conv3dForwardFn> conv3d_forward_stub;
extern DispatchStub<Conv3dBackwardFn> conv3d_backward_stub;
void register_conv3d_cpu_kernels();

}  // namespace minidl
