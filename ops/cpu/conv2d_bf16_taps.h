// bfloat16 conv2d by one GEMM per kernel tap (ops/cpu/conv2d_bf16_taps.cpp),
// for small padded maps: there im2col's GEMM spends much of its work on
// padding (a 3x3 kernel with padding 1 on a 4x4 map reads inside the input
// in 100 of its 144 tap-pixel products), while a GEMM per tap covers only the
// output pixels at which that tap reads inside the input. Zen 4, 1 thread,
// ResNet-18's 512 -> 512 convs on 4x4 maps at batch 64 (bench_train
// --profile 1, forward + backward): im2col 82-85 ms against PyTorch's 55.7
// (2026-11-27). Internal to ops/: conv2d_bf16.cpp calls these for the
// geometries conv2d_bf16_taps_applies() accepts.
#pragma once

#include <cstdint>

#include "minidl/core/half.h"
#include "minidl/ops/conv2d.h"

namespace minidl::cpu {

// Output maps of at most this many pixels take the taps (4x4: ResNet-18's last stage).
inline constexpr int64_t kConvTapsMaxPixels = 16;

// groups 1, stride 1, dilation 1, a kernel larger than 1x1, some padding,
// and an output map of at most kConvTapsMaxPixels pixels.
bool conv2d_bf16_taps_applies(const Conv2dGeometry& g);

// Contiguous NCHW x/dx, NCHW y/dy, (K, C, kH, kW) w/dw, (K) bias (or nullptr).
// Each overwrites its output.
void conv2d_forward_bf16_taps(const Conv2dGeometry& g, const BFloat16* x, const BFloat16* w, const BFloat16* bias,
                              BFloat16* y);
void conv2d_backward_input_bf16_taps(const Conv2dGeometry& g, const BFloat16* dy, const BFloat16* w, BFloat16* dx);
void conv2d_backward_weight_bf16_taps(const Conv2dGeometry& g, const BFloat16* dy, const BFloat16* x, BFloat16* dw);

}  // namespace minidl::cpu
