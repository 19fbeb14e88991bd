// CPU kernels of conv2d over raw NCHW pointers (no Tensor), so tests and
// benchmarks can call them directly; ops/cpu/conv2d.cpp registers them as the
// op's CPU kernels. How each path works is described at the top of its file.
#pragma once

#include <cstdint>

#include "minidl/ops/conv2d.h"  // Conv2dGeometry

namespace minidl {

// OpenMP threads worth using for one call: 1 inside a parallel region or
// for a problem too small to repay waking the others, else up to
// omp_get_max_threads().
int conv2d_threads(const Conv2dGeometry& g);

// How a call is computed. kShiftedPlanes: implicit GEMM over shifted input
// planes, one image at a time (ops/cpu/conv2d_shifted.cpp; best for big maps).
// kIm2colGemm: packed GEMM over a chunk of images, im2col done while
// packing, padding taps skipped (ops/cpu/conv2d_im2col.cpp; best for small maps
// with many channels). kWinograd: Winograd F(2x2, 3x3) for 3x3 stride-1
// kernels (ops/cpu/conv2d_winograd.cpp; 2.25x fewer products). kWinograd4:
// Winograd F(4x4, 3x3) for the same kernels (4x fewer products, more
// rounding error: see ops/cpu/conv2d_winograd_transforms.h) in forward and
// grad input; its grad weight is F(2x2)'s. kAuto: conv2d_pick_algo decides.
enum class Conv2dAlgo { kAuto, kShiftedPlanes, kIm2colGemm, kWinograd, kWinograd4 };

// The cost rule behind kAuto (documented at its definition, ops/cpu/conv2d_kernels.cpp).
Conv2dAlgo conv2d_pick_algo(const Conv2dGeometry& g);

// The path each pass of a call takes: `algo`, or for kAuto conv2d_pick_algo's
// choice adjusted per pass (the rule at the definition, ops/cpu/conv2d_kernels.cpp).
enum class Conv2dPass { kForward, kInput, kWeight };
Conv2dAlgo conv2d_resolve_algo(const Conv2dGeometry& g, Conv2dPass pass, Conv2dAlgo algo = Conv2dAlgo::kAuto);

// Whether kWinograd can compute g: a 3x3 kernel, stride 1, dilation 1, padding <= 2.
bool conv2d_winograd_applies(const Conv2dGeometry& g);

// x: (N, C, H, W); w: (K, C/groups, kH, kW); bias: (K) or nullptr;
// y: (N, K, out_h, out_w). Overwrites y.
template <class T>
void conv2d_forward_kernel(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y,
                           Conv2dAlgo algo = Conv2dAlgo::kAuto);

// dx = dL/dx given dy = dL/dy. Overwrites dx (N, C, H, W).
template <class T>
void conv2d_backward_input_kernel(const Conv2dGeometry& g, const T* dy, const T* w, T* dx,
                                  Conv2dAlgo algo = Conv2dAlgo::kAuto);

// dw = dL/dw and dbias = dL/dbias; either may be nullptr (not wanted). Overwrites.
template <class T>
void conv2d_backward_weight_kernel(const Conv2dGeometry& g, const T* dy, const T* x, T* dw, T* dbias,
                                   Conv2dAlgo algo = Conv2dAlgo::kAuto);

// The three paths themselves; same contracts as above, dw only (no bias).
// Shifted planes (ops/cpu/conv2d_shifted.cpp):
template <class T>
void conv2d_shifted_forward(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y);
template <class T>
void conv2d_shifted_backward_input(const Conv2dGeometry& g, const T* dy, const T* w, T* dx);
template <class T>
void conv2d_shifted_backward_weight(const Conv2dGeometry& g, const T* dy, const T* x, T* dw);

// im2col + GEMM (ops/cpu/conv2d_im2col.cpp; grad input in conv2d_im2col_input.cpp, grad
// weight in conv2d_im2col_weight.cpp):
template <class T>
void conv2d_im2col_forward(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y);
template <class T>
void conv2d_im2col_backward_input(const Conv2dGeometry& g, const T* dy, const T* w, T* dx);
template <class T>
void conv2d_im2col_backward_weight(const Conv2dGeometry& g, const T* dy, const T* x, T* dw);

// Winograd (ops/cpu/conv2d_winograd.cpp), for geometries where
// conv2d_winograd_applies; tile: 2 for F(2x2, 3x3), 4 for F(4x4, 3x3).
// T: float, double, or a 16-bit type (BFloat16, Half) read and written as
// is, computed in float32 and each output rounded once. The forward and grad
// input return false, their output unusable, when their input (x, dy) holds
// an inf or NaN: Winograd's transforms would spread NaN over whole tiles
// (inf - inf), so the caller runs a direct path instead, as
// conv2d_forward_kernel and conv2d_backward_input_kernel do.
template <class T>
bool conv2d_winograd_forward(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y, int tile = 2);
template <class T>
bool conv2d_winograd_backward_input(const Conv2dGeometry& g, const T* dy, const T* w, T* dx, int tile = 2);
template <class T>
void conv2d_winograd_backward_weight(const Conv2dGeometry& g, const T* dy, const T* x, T* dw, int tile = 2);

// How many passes of 16-bit convs (forward, grad input, grad weight) the
// registered CPU kernels (ops/cpu/conv2d.cpp) ran on the Winograd kernels
// above directly, in this process: tests tell that path from Float32Compute's.
int64_t conv2d_reduced_winograd_passes();

}  // namespace minidl
