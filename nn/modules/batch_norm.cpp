// nn::BatchNorm1d/2d/3d and the shared NormBaseImpl: PyTorch's _NormBase and
// _BatchNorm (torch/nn/modules/batchnorm.py), forward through
// minidl::batch_norm (ops/batch_norm.h holds the math).
#include "minidl/nn/modules/batch_norm.h"

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"
#include "minidl/nn/init.h"
#include "minidl/ops/batch_norm.h"

namespace minidl::nn {

NormBaseImpl::NormBaseImpl(std::string name, const BatchNormOptions& options_)
    : Module(std::move(name)), options(options_) {
  const int64_t C = options.num_features();
  MINIDL_CHECK(C >= 0, this->name(), ": expected a non-negative num_features, got ", C);
  weight = register_parameter("weight", options.affine() ? empty({C}) : Tensor());
  bias = register_parameter("bias", options.affine() && options.bias() ? empty({C}) : Tensor());
  const bool track = options.track_running_stats();
  running_mean = register_buffer("running_mean", track ? zeros({C}) : Tensor());
  running_var = register_buffer("running_var", track ? ones({C}) : Tensor());
  num_batches_tracked = register_buffer("num_batches_tracked", track ? zeros({}, kInt64) : Tensor());
  reset_parameters();
}

void NormBaseImpl::reset_running_stats() {
  NoGradGuard no_grad;
  if (running_mean.defined()) running_mean.zero_();
  if (running_var.defined()) running_var.fill_(1.0);
  if (num_batches_tracked.defined()) num_batches_tracked.zero_();
}

void NormBaseImpl::reset_parameters() {
  reset_running_stats();
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

std::string NormBaseImpl::extra_repr() const {
  const auto& o = options;
  return std::to_string(o.num_features()) + ", eps=" + repr_float(o.eps()) +
         ", momentum=" + (o.momentum() ? repr_float(*o.momentum()) : std::string("None")) +
         ", affine=" + repr_bool(o.affine()) + ", bias=" + repr_bool(bias.defined()) +
         ", track_running_stats=" + repr_bool(o.track_running_stats());
}

Tensor BatchNormImplBase::forward(const Tensor& input) {
  MINIDL_CHECK(input.defined(), name(), ": the input tensor is undefined");
  check_input_dim(input);
  run_forward_pre_hooks(input);  // nn::precise_bn records batch sizes here
  const auto& o = options;
  double factor = o.momentum().value_or(0.0);
  if (is_training() && o.track_running_stats() && num_batches_tracked.defined()) {
    if (o.momentum()) {
      NoGradGuard no_grad;
      num_batches_tracked.add_(1);  // on the buffer's device; its value is not needed
    } else {
      factor = 1.0 / static_cast<double>(count_batch());  // cumulative moving average
    }
  }
  // Batch statistics in training, and whenever there is nothing else to use.
  const bool bn_training = is_training() || (!running_mean.defined() && !running_var.defined());
  // Buffers are handed over (used in eval, updated in training) unless
  // training with track_running_stats switched off.
  const bool pass_buffers = !is_training() || o.track_running_stats();
  return normalize(input, Step{factor, bn_training, pass_buffers ? running_mean : Tensor(),
                               pass_buffers ? running_var : Tensor()});
}

// momentum=None needs num_batches_tracked's value on the host (the factor is a
// kernel argument, and SyncBatchNorm's Step takes it as a double). PyTorch
// reads it back (float(num_batches_tracked)), a device sync per step; here a
// host mirror (tracked_) holds it: the count is bumped on the host and written
// with fill_ (a device kernel with the value as its argument), and the buffer
// is read (item()) only when the mirror is stale, i.e. something else wrote
// or replaced it: load_state_dict, to(), reset_running_stats, a write by hand,
// or DDP's buffer broadcast (which with broadcast_buffers rewrites it every
// step, so there it is read every step, as in PyTorch).
int64_t BatchNormImplBase::count_batch() {
  NoGradGuard no_grad;
  const TensorImpl& impl = *num_batches_tracked.impl();
  const bool fresh = tracked_.storage == impl.storage && tracked_.offset == impl.offset &&
                     tracked_.version == impl.storage->version();
  if (!fresh) tracked_.value = num_batches_tracked.item<int64_t>();
  tracked_.value += 1;
  num_batches_tracked.fill_(static_cast<double>(tracked_.value));
  tracked_.storage = impl.storage;
  tracked_.offset = impl.offset;
  tracked_.version = impl.storage->version();
  return tracked_.value;
}

Tensor BatchNormImplBase::normalize(const Tensor& input, const Step& step) {
  return batch_norm(input, step.running_mean, step.running_var, weight, bias, step.use_batch_stats, step.momentum,
                    options.eps());
}

void BatchNorm1dImpl::check_input_dim(const Tensor& input) const {
  MINIDL_CHECK(input.dim() == 2 || input.dim() == 3, "expected 2D or 3D input (got ", input.dim(), "D input)");
}

void BatchNorm2dImpl::check_input_dim(const Tensor& input) const {
  MINIDL_CHECK(input.dim() == 4, "expected 4D input (got ", input.dim(), "D input)");
}

void BatchNorm3dImpl::check_input_dim(const Tensor& input) const {
  MINIDL_CHECK(input.dim() == 5, "expected 5D input (got ", input.dim(), "D input)");
}

}  // namespace minidl::nn
