// Memory formats (PyTorch's torch.memory_format): the order in which a 4-D
// (N, C, H, W) tensor's elements sit in memory, its logical shape unchanged.
//   Contiguous    NCHW, strides (CHW, HW, W, 1)
//   ChannelsLast  NHWC, strides (HWC, 1, WC, C): the layout cuDNN's
//                 tensor-core convolutions compute in; an NCHW conv pays a
//                 transpose each way inside cuDNN (~1.5 ms of a b128
//                 ResNet-18 step on an H100, both libraries, 2026-11-27).
//   Preserve      (empty_like) the source's strides when they are dense.
// x.contiguous(MemoryFormat::ChannelsLast) converts; to(dtype), to(device),
// elementwise ops, BatchNorm, conv2d and the 2-D pools keep a channels-last
// input's layout in their result and gradients (so a network fed
// channels-last images stays channels-last); nn::Module::to(MemoryFormat)
// converts the 4-D weights, which the optimizers follow; every other op reads
// any strides and returns contiguous results, as before.
#pragma once

#include <initializer_list>
#include <optional>
#include <vector>

#include "minidl/core/shape.h"

namespace minidl {

class Tensor;

enum class MemoryFormat { Contiguous, ChannelsLast, Preserve };

const char* memory_format_name(MemoryFormat fmt);  // "torch.channels_last", as PyTorch prints it

// Strides of a 4-D shape laid out NHWC. Refuses other ranks, as PyTorch:
// "required rank 4 tensor to use channels_last format".
Shape channels_last_strides(const Shape& shape);

// Whether (shape, strides) is laid out as `fmt` (Contiguous or ChannelsLast);
// dims of size 1 may have any stride (PyTorch's rule), so a tensor can be
// both (C == 1, or H == W == 1).
bool strides_match(const Shape& shape, const Shape& strides, MemoryFormat fmt);

// Whether a 4-D tensor's strides order its dims N, H, W, C (outermost to
// innermost), as PyTorch decides suggest_memory_format(): an NHWC tensor
// narrowed or sliced still counts; ambiguous ones (one channel, 1x1 maps laid
// out NCHW) do not.
bool has_channels_last_strides(const Shape& sizes, const Shape& strides);

// The dims of `t` ordered from the outermost in memory to the innermost
// (t.permute(order) is contiguous) when t is dense: its elements fill numel
// consecutive slots without gaps or overlaps. Nothing otherwise (broadcast,
// narrowed or overlapping views).
std::optional<Shape> dense_dim_order(const Tensor& t);

// PyTorch's is_non_overlapping_and_dense: the elements fill numel
// consecutive slots (contiguous, channels-last, any permutation of them).
bool is_non_overlapping_and_dense(const Tensor& t);

// Whether dense a and b of one shape hold each element at the same offset
// from their first (strides equal where the size exceeds 1): a kernel may
// walk them together as flat arrays (the optimizers' parameter, gradient and
// state of a channels-last parameter).
bool same_dense_layout(const Tensor& a, const Tensor& b);

// `t` laid out as dense `like` (same shape): t itself when it already is,
// else a copy with like's strides. No autograd.
Tensor to_layout_of(const Tensor& t, const Tensor& like);

// The layout of an elementwise result of `shape`: ChannelsLast when one of
// `inputs` of that shape suggests it (the first such wins), else Contiguous.
MemoryFormat result_format(const Shape& shape, std::initializer_list<Tensor> inputs);

// For kernels that walk their output in order: views of `out` and of each
// operand (same shape as out, any strides) with the dims permuted into out's
// memory order, so that out's view is contiguous and operands laid out like
// out are too (the kernels' contiguous fast paths). No autograd; out must be
// dense. Returns {out, operands...} unchanged when out is contiguous.
std::vector<Tensor> in_memory_order(const Tensor& out, const std::vector<Tensor>& operands);

}  // namespace minidl
