// Sliding-window inference: a network trained on patches applied to whole
// volumes (or images) of any size, as MONAI's sliding_window_inference
// (monai.inferers), with its defaults and window placement:
//
//   nn::SlidingWindowOptions o;
//   o.roi_size = {32, 32, 32};
//   Tensor logits = nn::sliding_window_inference(volume, o, [&](const Tensor& w) { return net->forward(w); });
//
// inputs: (N, C, *spatial), roi_size one entry per spatial dim (<= 0: that
// dim's whole size). Along a dim of size S the windows start every
// int(roi * (1 - overlap)) voxels (at least 1; roi itself when roi == S) from
// 0 until one reaches the end; a window that would run past the end is
// moved back to end there. Where S < roi, the input is padded with `cval`
// (half before, the rest after) and the output cropped back. Windows of all
// N images are batched sw_batch_size at a time, in order (image, then window
// positions, last dim fastest). The output at each voxel is the weighted
// mean of the predictions of the windows that cover it, with weights from
// importance_map: 1 everywhere (kConstant), or a Gaussian centred on the
// window with sigma = sigma_scale * roi per dim (kGaussian; weights below
// max(min, 1e-3) raised to it), which downweights window borders.
//
// predictor: (B, C, *roi) -> (B, C_out, *roi), on the inputs' device; its
// spatial size must be the window's (MONAI's zoomed outputs are not
// supported). The result is (N, C_out, *spatial) in the predictor's dtype
// (float32 when that is a 16-bit type: sums of weights need the range),
// computed without autograd.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "minidl/core/tensor.h"

namespace minidl::nn {

enum class BlendMode { kConstant, kGaussian };

struct SlidingWindowOptions {
  std::vector<int64_t> roi_size;  // one per spatial dim; <= 0 means the whole dim
  int64_t sw_batch_size = 1;      // windows per predictor call
  double overlap = 0.25;          // fraction of a window shared with the next, in [0, 1)
  BlendMode mode = BlendMode::kConstant;
  double sigma_scale = 0.125;     // kGaussian: sigma = sigma_scale * roi
  double cval = 0.0;              // padding value where the input is smaller than the window
};

// The per-voxel weights of a window of `patch_size` (float32, on `device`).
Tensor importance_map(const std::vector<int64_t>& patch_size, BlendMode mode, double sigma_scale = 0.125,
                      Device device = kCPU);

// The start of each window along one dim of `size` voxels (size >= roi >= 1).
std::vector<int64_t> window_starts(int64_t size, int64_t roi, double overlap);

Tensor sliding_window_inference(const Tensor& inputs, const SlidingWindowOptions& options,
                                const std::function<Tensor(const Tensor&)>& predictor);

}  // namespace minidl::nn
