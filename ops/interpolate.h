// Resampling of N,C,(D,)(H,)W input: torch.nn.functional.interpolate with the
// modes nearest, nearest-exact, linear (3-D input), bilinear (4-D), trilinear (5-D).
//
//   interpolate(x, {.scale_factor = {2.0}, .mode = "trilinear"})
//   interpolate(x, {.size = {32, 32}, .mode = "bilinear", .align_corners = true})
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl {

struct InterpolateOptions {
  // Exactly one of size and scale_factor: one value per spatial dimension, or a
  // single value for all of them (as PyTorch's int / float).
  std::vector<int64_t> size;
  std::vector<double> scale_factor;
  std::string mode = "nearest";
  // Linear modes only (PyTorch refuses it for nearest); unset means false.
  std::optional<bool> align_corners;
  // true: derive the output size from scale_factor, then resample as if `size` had
  // been given (PyTorch's recompute_scale_factor).
  std::optional<bool> recompute_scale_factor;
};

Tensor interpolate(const Tensor& x, const InterpolateOptions& options);

// ---- kernel interface (a backend registers its kernels here) ----------------

enum class UpsampleMode : int64_t { Nearest = 0, NearestExact = 1, Linear = 2 };

// `planes` volumes of in = (D, H, W) resampled to out; 1-D and 2-D input have
// leading sizes 1 (an identity along those dims).
struct UpsampleGeometry {
  int64_t planes = 0;
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1};
  // PyTorch's `scales`: the user's scale_factor along each dim, or 0 when the
  // source coordinate uses in/out instead (size given, or recomputed).
  std::array<double, 3> scales{0, 0, 0};
  UpsampleMode mode = UpsampleMode::Nearest;
  bool align_corners = false;

  int64_t in_plane() const { return in[0] * in[1] * in[2]; }
  int64_t out_plane() const { return out[0] * out[1] * out[2]; }
};

using UpsampleForwardFn = void(const Tensor& x, const Tensor& y, const UpsampleGeometry& g);
// grad_x is overwritten (every element).
using UpsampleBackwardFn = void(const Tensor& grad_y, const Tensor& grad_x, const UpsampleGeometry& g);

extern DispatchStub<UpsampleForwardFn> upsample_forward_stub;
extern DispatchStub<UpsampleBackwardFn> upsample_backward_stub;
void register_interpolate_cpu_kernels();

}  // namespace minidl
