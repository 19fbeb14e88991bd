// Loss modules: each forwards to its op with the options; BCE's weight and
// pos_weight are registered as buffers (as torch.nn), Dice's options are checked here.
#include "minidl/nn/modules/loss.h"

#include "minidl/core/check.h"
#include "minidl/ops/binary_cross_entropy.h"
#include "minidl/ops/dice_loss.h"

namespace minidl::nn {

BCELossImpl::BCELossImpl(const BCELossOptions& options_) : Module("BCELoss"), options(options_) {
  weight = register_buffer("weight", options.weight());
}

Tensor BCELossImpl::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy(input, target, weight, options.reduction());
}

BCEWithLogitsLossImpl::BCEWithLogitsLossImpl(const BCEWithLogitsLossOptions& options_)
    : Module("BCEWithLogitsLoss"), options(options_) {
  weight = register_buffer("weight", options.weight());
  pos_weight = register_buffer("pos_weight", options.pos_weight());
}

Tensor BCEWithLogitsLossImpl::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy_with_logits(input, target, weight, options.reduction(), pos_weight);
}

namespace {
void check_smooth(double smooth, const char* module) {
  MINIDL_CHECK(smooth >= 0.0, module, ": expected smooth >= 0, got ", smooth);
}
}  // namespace

DiceLossImpl::DiceLossImpl(const DiceLossOptions& options_) : Module("DiceLoss"), options(options_) {
  check_smooth(options.smooth(), "DiceLoss");
}

Tensor DiceLossImpl::forward(const Tensor& input, const Tensor& target) {
  return dice_loss(input, target, options.smooth(), options.batch());
}

std::string DiceLossImpl::extra_repr() const {
  return "smooth=" + repr_float(options.smooth()) + ", batch=" + repr_bool(options.batch());
}

BCEDiceLossImpl::BCEDiceLossImpl(const BCEDiceLossOptions& options_) : Module("BCEDiceLoss"), options(options_) {
  check_smooth(options.smooth(), "BCEDiceLoss");
}

Tensor BCEDiceLossImpl::forward(const Tensor& input, const Tensor& target) {
  return bce_dice_loss(input, target, options.bce_weight(), options.dice_weight(), options.smooth(),
                       options.batch());
}

std::string BCEDiceLossImpl::extra_repr() const {
  return "bce_weight=" + repr_float(options.bce_weight()) + ", dice_weight=" + repr_float(options.dice_weight()) +
         ", smooth=" + repr_float(options.smooth()) + ", batch=" + repr_bool(options.batch());
}

}  // namespace minidl::nn
