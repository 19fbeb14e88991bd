// 2-D pooling, NCHW (or unbatched CHW).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl {

// stride defaults to kernel_size when given as {0, 0}, as PyTorch's stride=None.
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size,
                  std::array<int64_t, 2> stride = {0, 0}, std::array<int64_t, 2> padding = {0, 0});
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size,
                  std::array<int64_t, 2> stride = {0, 0}, std::array<int64_t, 2> padding = {0, 0},
                  bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);
Tensor adaptive_max_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);

// ---- kernel interface (a backend registers its kernels here) ----------------

// N*C independent planes of H x W pooled to OH x OW.
struct Pool2dGeometry {
  int64_t planes = 0, H = 0, W = 0, OH = 0, OW = 0;
  int64_t kH = 1, kW = 1, sH = 1, sW = 1, pH = 0, pW = 0;  // unused by the adaptive pools

  std::vector<int64_t> to_list() const { return {planes, H, W, OH, OW, kH, kW, sH, sW, pH, pW}; }
  static Pool2dGeometry from_list(const std::vector<int64_t>& v) {
    return {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]};
  }
  // Rough work estimate, to parallelize only when it pays.
  int64_t work(int64_t per_output) const { return planes * OH * OW * per_output; }
};

using MaxPoolForwardFn = void(const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dGeometry& g,
                              bool adaptive);
using MaxPoolBackwardFn = void(const Tensor& grad_y, const Tensor& indices, const Tensor& grad_x,
                               const Pool2dGeometry& g);
using AvgPoolForwardFn = void(const Tensor& x, const Tensor& y, const Pool2dGeometry& g, bool adaptive,
                              bool count_include_pad);
using AvgPoolBackwardFn = void(const Tensor& grad_y, const Tensor& grad_x, const Pool2dGeometry& g, bool adaptive,
                               bool count_include_pad);

extern DispatchStub<MaxPoolForwardFn> max_pool2d_forward_stub;
extern DispatchStub<MaxPoolBackwardFn> max_pool2d_backward_stub;
extern DispatchStub<AvgPoolForwardFn> avg_pool2d_forward_stub;
extern DispatchStub<AvgPoolBackwardFn> avg_pool2d_backward_stub;
void register_pooling_cpu_kernels();

}  // namespace minidl
