// 2-D and 3-D pooling, NCHW / NCDHW (or unbatched CHW / CDHW). A 4-D
// channels-last input (x.suggest_memory_format() == ChannelsLast) is pooled in
// place in NHWC and gives channels-last outputs, indices and gradients, as
// PyTorch's max_pool2d/avg_pool2d/adaptive pools do.
//
// Argument order follows torch.nn.functional: avg_pool is (x, kernel_size,
// stride, padding, ceil_mode, count_include_pad, divisor_override), so a call
// ported positionally from PyTorch keeps its meaning.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl {

using Size2 = std::array<int64_t, 2>;
using Size3 = std::array<int64_t, 3>;

// stride defaults to kernel_size when given as all zeros, as PyTorch's stride=None.
Tensor max_pool2d(const Tensor& x, Size2 kernel_size, Size2 stride = {0, 0}, Size2 padding = {0, 0},
                  Size2 dilation = {1, 1}, bool ceil_mode = false);
// (output, indices): indices (int64) are flat h*W+w positions in each input plane,
// as PyTorch's return_indices=True.
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Size2 kernel_size, Size2 stride = {0, 0},
                                                   Size2 padding = {0, 0}, Size2 dilation = {1, 1},
                                                   bool ceil_mode = false);
// divisor_override replaces the window size as the divisor (PyTorch's divisor_override).
Tensor avg_pool2d(const Tensor& x, Size2 kernel_size, Size2 stride = {0, 0}, Size2 padding = {0, 0},
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);
Tensor adaptive_max_pool2d(const Tensor& x, Size2 output_size);
std::tuple<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x, Size2 output_size);

// 3-D: sizes are (D, H, W); indices are flat d*H*W+h*W+w positions.
Tensor max_pool3d(const Tensor& x, Size3 kernel_size, Size3 stride = {0, 0, 0}, Size3 padding = {0, 0, 0},
                  Size3 dilation = {1, 1, 1}, bool ceil_mode = false);
std::tuple<Tensor, Tensor> max_pool3d_with_indices(const Tensor& x, Size3 kernel_size, Size3 stride = {0, 0, 0},
                                                   Size3 padding = {0, 0, 0}, Size3 dilation = {1, 1, 1},
                                                   bool ceil_mode = false);
Tensor avg_pool3d(const Tensor& x, Size3 kernel_size, Size3 stride = {0, 0, 0}, Size3 padding = {0, 0, 0},
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
Tensor adaptive_avg_pool3d(const Tensor& x, Size3 output_size);
Tensor adaptive_max_pool3d(const Tensor& x, Size3 output_size);
std::tuple<Tensor, Tensor> adaptive_max_pool3d_with_indices(const Tensor& x, Size3 output_size);

// ---- kernel interface (a backend registers its kernels here) ----------------

// `planes` independent volumes of in = (D, H, W) pooled to out = (OD, OH, OW).
// 2-D pools are the case D = OD = 1 with a 1-deep window, so one kernel serves both.
struct PoolGeometry {
  int64_t planes = 0;
  Size3 in{1, 1, 1}, out{1, 1, 1};
  // Window pools only (adaptive pools use PyTorch's floor/ceil bins instead).
  Size3 kernel{1, 1, 1}, stride{1, 1, 1}, padding{0, 0, 0}, dilation{1, 1, 1};
  bool adaptive = false;
  bool count_include_pad = true;  // avg only
  int64_t divisor_override = 0;   // avg only; 0: none
  // 0: the planes lie one after another. C > 0: input and output are
  // channels-last with C channels: sample n's C planes interleaved as
  // (D, H, W, C), plane p = n C + c. Indices stay positions in the plane.
  int64_t channels_last = 0;

  int64_t in_plane() const { return in[0] * in[1] * in[2]; }
  int64_t out_plane() const { return out[0] * out[1] * out[2]; }
  // Rough work estimates, to parallelize only when it pays.
  int64_t work(int64_t per_output) const { return planes * out_plane() * per_output; }
  int64_t taps_per_output() const;

  std::vector<int64_t> to_list() const;
  static PoolGeometry from_list(const std::vector<int64_t>& v);
};

// indices: flat position of each output's maximum inside its input plane.
using MaxPoolForwardFn = void(const Tensor& x, const Tensor& y, const Tensor& indices, const PoolGeometry& g);
// grad_x is overwritten (every element).
using MaxPoolBackwardFn = void(const Tensor& grad_y, const Tensor& indices, const Tensor& grad_x,
                               const PoolGeometry& g);
using AvgPoolForwardFn = void(const Tensor& x, const Tensor& y, const PoolGeometry& g);
using AvgPoolBackwardFn = void(const Tensor& grad_y, const Tensor& grad_x, const PoolGeometry& g);

extern DispatchStub<MaxPoolForwardFn> max_pool_forward_stub;
extern DispatchStub<MaxPoolBackwardFn> max_pool_backward_stub;
extern DispatchStub<AvgPoolForwardFn> avg_pool_forward_stub;
extern DispatchStub<AvgPoolBackwardFn> avg_pool_backward_stub;
void register_pooling_cpu_kernels();

}  // namespace minidl
