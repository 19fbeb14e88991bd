// conv3d by Winograd in the plane, each input plane transformed once per
// work item and summed over the depth taps in the transformed domain
// (ops/cpu/conv3d_winograd.cpp). ops/cpu/conv3d.cpp calls it for the 3x3
// stride-1 plane kernels that conv2d would run by Winograd on its stacked
// depth slices.
#pragma once

#include "minidl/ops/conv3d.h"  // Conv3dGeometry

namespace minidl {

// groups 1 and a plane kernel that conv2d_winograd_applies to (3x3, stride 1,
// dilation 1, padding <= 2); any depth kernel, stride, padding, dilation.
bool conv3d_winograd_applies(const Conv3dGeometry& g);
// The same with depth stride 1 and pad_d <= (kernel_d - 1) * dilation_d (grad input).
bool conv3d_winograd_input_applies(const Conv3dGeometry& g);

// Contiguous NCDHW x/y/dy/dx, (K, C, kD, 3, 3) w, (K) bias or nullptr; E
// float, double, or a 16-bit type read and written as is (computed in
// float32, each output rounded once). tile: 2 for F(2x2, 3x3), 4 for F(4x4).
// false, the output unusable, when x (dy) holds an inf or NaN: the caller
// runs the stacked direct path instead (as conv2d_winograd_forward).
template <class E>
bool conv3d_winograd_forward(const Conv3dGeometry& g, const E* x, const E* w, const E* bias, E* y, int tile);
template <class E>
bool conv3d_winograd_backward_input(const Conv3dGeometry& g, const E* dy, const E* w, E* dx, int tile);

// How many calls of the two above ran in this process (tests tell this path from conv3d's stacked one).
int64_t conv3d_winograd_calls();

}  // namespace minidl
