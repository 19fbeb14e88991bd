// Loss modules: BCELoss and BCEWithLogitsLoss as torch.nn (same options and
// defaults; weight and pos_weight are buffers, so they move with to() and are
// saved in the state dict when given), and the segmentation losses DiceLoss
// and BCEDiceLoss (no PyTorch built-in; see ops/dice_loss.h for the formula).
// Each is called as loss_fn(input, target).
//
//   auto criterion = nn::BCEDiceLoss(nn::BCEDiceLossOptions().dice_weight(2.0));
//   Tensor loss = criterion(logits, masks);   // logits, masks: (N, 1, D, H, W)
#pragma once

#include <string>

#include "minidl/nn/module.h"
#include "minidl/ops/loss.h"

namespace minidl::nn {

struct BCELossOptions {
  MINIDL_ARG(Tensor, weight) = Tensor();  // broadcast to the input's shape
  MINIDL_ARG(Reduction, reduction) = Reduction::Mean;
};

// binary_cross_entropy on probabilities (ops/binary_cross_entropy.h).
class BCELossImpl : public Module {
 public:
  explicit BCELossImpl(const BCELossOptions& options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  BCELossOptions options;
  Tensor weight;  // buffer (undefined when not given)
};
MINIDL_MODULE(BCELoss);

struct BCEWithLogitsLossOptions {
  MINIDL_ARG(Tensor, weight) = Tensor();
  MINIDL_ARG(Reduction, reduction) = Reduction::Mean;
  MINIDL_ARG(Tensor, pos_weight) = Tensor();  // (C) for (N, C); (C, 1, 1) for (N, C, H, W)
};

// binary_cross_entropy_with_logits (ops/binary_cross_entropy.h).
class BCEWithLogitsLossImpl : public Module {
 public:
  explicit BCEWithLogitsLossImpl(const BCEWithLogitsLossOptions& options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  BCEWithLogitsLossOptions options;
  Tensor weight, pos_weight;  // buffers (undefined when not given)
};
MINIDL_MODULE(BCEWithLogitsLoss);

struct DiceLossOptions {
  MINIDL_ARG(double, smooth) = 1.0;
  MINIDL_ARG(bool, batch) = false;  // false: 1 - mean of per-sample dice; true: one dice over the batch
};

// 1 - soft Dice of sigmoid(input) and target (ops/dice_loss.h); input: logits.
class DiceLossImpl : public Module {
 public:
  explicit DiceLossImpl(const DiceLossOptions& options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  std::string extra_repr() const override;  // "smooth=1.0, batch=False"
  DiceLossOptions options;
};
MINIDL_MODULE(DiceLoss);

struct BCEDiceLossOptions {
  MINIDL_ARG(double, bce_weight) = 1.0;
  MINIDL_ARG(double, dice_weight) = 1.0;
  MINIDL_ARG(double, smooth) = 1.0;
  MINIDL_ARG(bool, batch) = false;
};

// bce_weight * BCEWithLogitsLoss (mean) + dice_weight * DiceLoss; input: logits.
class BCEDiceLossImpl : public Module {
 public:
  explicit BCEDiceLossImpl(const BCEDiceLossOptions& options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  std::string extra_repr() const override;  // "bce_weight=1.0, dice_weight=1.0, smooth=1.0, batch=False"
  BCEDiceLossOptions options;
};
MINIDL_MODULE(BCEDiceLoss);

}  // namespace minidl::nn
