// PyTorch's padding strings for conv2d / conv3d: padding="valid" (none) and
// padding="same" (output size = input size; stride 1 only).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "minidl/core/tensor.h"

namespace minidl {

// "same": per spatial dimension dilation * (kernel - 1) padding in all, half
// of it (rounded down) on the left and the rest on the right, as PyTorch.
// Returned in F.pad order (last dimension first: left, right, ...).
std::vector<int64_t> conv_same_pads(const std::vector<int64_t>& kernel, const std::vector<int64_t>& dilation);

// Throws PyTorch's error unless padding is "same" or "valid", and for "same" with a stride other than 1.
void check_conv_padding_string(const std::string& padding, const std::vector<int64_t>& stride);

// Along one spatial dimension `dim`: the padded input in + 2 padding and the
// dilated kernel's span dilation (kernel - 1) + 1, refused naming `op` where
// they do not fit int64 (padding past INT64_MAX / 2 in PyTorch's words).
struct ConvExtent {
  int64_t padded, span;
};
ConvExtent conv_extent(const char* op, int dim, int64_t in, int64_t padding, int64_t dilation, int64_t kernel);

// conv2d / conv3d with padding "valid" or "same" (a const char*, so that
// conv2d(x, w, b, {.stride = ...}) still picks the Conv2dParams overload). Where "same" pads
// unequally (an even kernel), the input is first padded with zeros by the
// difference on the right, then convolved with the symmetric part (PyTorch's way).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* padding,
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* padding,
              std::array<int64_t, 3> stride = {1, 1, 1}, std::array<int64_t, 3> dilation = {1, 1, 1},
              int64_t groups = 1);

}  // namespace minidl
