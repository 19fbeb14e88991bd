// pad: torch.nn.functional.pad (constant, reflect, replicate, circular).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "minidl/core/dispatch.h"
#include "minidl/core/tensor.h"

namespace minidl {

enum class PadMode { kConstant, kReflect, kReplicate, kCircular };

// "constant", "reflect", "replicate", "circular" (PyTorch's names).
PadMode pad_mode_from_string(const std::string& mode);
const char* pad_mode_name(PadMode mode);

// pads = (left_last, right_last, left_second_last, right_second_last, ...),
// as F.pad: the last len(pads)/2 dimensions are padded, the last one first.
// Constant padding takes any number of dimensions and negative pads (which
// crop); the other modes pad the last 1, 2 or 3 dimensions of a tensor with
// one or two more (batch and channel) and fill from the input: reflect
// mirrors without repeating the edge (pad < size), replicate repeats the
// edge, circular wraps around (pad <= size; as PyTorch, negative pads crop
// first and a positive pad wraps within what is left, so it must be at most that).
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode = PadMode::kConstant, double value = 0.0);
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode, double value = 0.0);

// ---- kernel interface -----------------------------------------------------------

// x viewed as (outer, in_sizes...) and y as (outer, out_sizes...): the padded
// dimensions, outermost first, each with its left pad (negative: cropped).
// source[d][i]: the input index that output index i of padded dimension d
// reads, or -1 where it is `value` (ops/cuda/pad_math.h's pad_source_index;
// the CPU kernels read these tables, the CUDA kernels compute them from
// left and mode).
struct PadGeometry {
  int64_t outer = 1;
  std::vector<int64_t> in_sizes, out_sizes, left;
  std::vector<std::vector<int64_t>> source;
  PadMode mode = PadMode::kConstant;
  double value = 0.0;
};

// Overwrites y. Backward overwrites dx with the sum of dy over the outputs
// that read each input element.
using PadForwardFn = void(const PadGeometry&, const Tensor& x, const Tensor& y);
using PadBackwardFn = void(const PadGeometry&, const Tensor& dy, const Tensor& dx);

extern DispatchStub<PadForwardFn> pad_forward_stub;
extern DispatchStub<PadBackwardFn> pad_backward_stub;
void register_pad_cpu_kernels();

}  // namespace minidl
