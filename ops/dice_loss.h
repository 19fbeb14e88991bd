// Soft Dice loss and BCE + Dice for binary (or multi-label) segmentation. No
// PyTorch built-in exists; these follow the common formulation:
//   p = sigmoid(input),  dice = (2 sum(p t) + smooth) / (sum(p) + sum(t) + smooth),  loss = 1 - dice
// Per sample (default): the sums run over every dim but the first (channels
// and voxels of one sample together) and the loss is 1 - the mean of the N
// per-sample dice values. batch = true: one dice over the whole batch.
// smooth (default 1.0) keeps an empty prediction on an empty target at loss 0
// and the gradient finite.
#pragma once

#include "minidl/core/tensor.h"

namespace minidl {

// input: logits (N, ...) (a 1-D input is N samples of one element); target:
// same shape and dtype, values in [0, 1] (masks, or soft labels).
Tensor dice_loss(const Tensor& input, const Tensor& target, double smooth = 1.0, bool batch = false);

// bce_weight * binary_cross_entropy_with_logits(input, target) ("mean")
//   + dice_weight * dice_loss(input, target, smooth, batch).
Tensor bce_dice_loss(const Tensor& input, const Tensor& target, double bce_weight = 1.0, double dice_weight = 1.0,
                     double smooth = 1.0, bool batch = false);

}  // namespace minidl
