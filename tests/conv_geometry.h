// Conv2dGeometry of a square-kernel conv over square maps, for the conv2d tests.
#pragma once

#include <cstdint>

#include "minidl/ops/conv2d.h"

namespace minidl::testing {

inline Conv2dGeometry square(int64_t N, int64_t C, int64_t K, int64_t HW, int64_t k, int64_t stride, int64_t pad,
                             int64_t dilation = 1, int64_t groups = 1) {
  Conv2dGeometry g;
  g.batch = N, g.in_channels = C, g.out_channels = K, g.in_h = g.in_w = HW, g.kernel_h = g.kernel_w = k;
  g.stride_h = g.stride_w = stride, g.pad_h = g.pad_w = pad, g.dilation_h = g.dilation_w = dilation;
  g.groups = groups;
  conv2d_set_output_size(g);
  return g;
}

}  // namespace minidl::testing
