// SyncBatchNorm: BatchNorm whose training statistics are those of the whole
// global batch, gathered over a process group (PyTorch's nn.SyncBatchNorm and
// torch/nn/modules/_functions.py). Works on CPU over Gloo, where PyTorch
// refuses ("SyncBatchNorm expected input tensor to be on GPU"), and on any
// other device: its statistics and collectives stay on the input's device.
//
//   dist::init_process_group("gloo");
//   auto model = nn::convert_sync_batch_norm(models::create_model("resnet20"));  // every BN -> SyncBN
//   auto bn = nn::SyncBatchNorm(64);                       // on the default group
//   auto bn2 = nn::SyncBatchNorm(64, 1e-5, 0.1, true, true, dist::new_group({0, 1}));
//
// Semantics (reference/pytorch-semantics.md section 2):
// - Parameters, buffers, state_dict keys, num_batches_tracked, momentum=None
//   and the repr are BatchNorm's: "SyncBatchNorm(64, eps=1e-05, momentum=0.1,
//   affine=True, bias=True, track_running_stats=True)". The input is (N, C, *), any dim >= 2.
// - The statistics are synchronized only in training, with a process group of
//   more than one rank (dist::is_initialized() or an explicit group). Otherwise
//   (eval, world size 1, no process group) it is plain minidl::batch_norm and
//   runs no collective.
// - Synchronized forward: one all-gather of [mean(C), invstd(C), count]; the
//   global mean/var are the count-weighted merge, so uneven per-rank batches
//   are exact, and a rank with an empty batch (N = 0) still joins the
//   collectives, contributes nothing and gets an empty output. The running
//   statistics use the global count (unbiased var_n / (n - 1)) and are equal on
//   every rank. A rank may hold a single value per channel when others hold more.
// - Backward: one all-reduce of [sum_dy, sum_dy_xmu]. grad_input is exact;
//   grad_weight / grad_bias are LOCAL (this rank's share; their sum over ranks
//   is the global gradient), exactly as PyTorch: DDP's gradient all-reduce
//   finishes the job (it averages, like the other parameters' gradients).
// - Every rank of the group must call each SyncBatchNorm the same number of
//   times in training, and run its backward, or the others wait (until the
//   group's timeout, which then fails with an error naming the collective).
#pragma once

#include <memory>
#include <optional>

#include "minidl/core/autograd/function.h"
#include "minidl/dist/process_group.h"
#include "minidl/nn/modules/batch_norm.h"

namespace minidl::dist {

// The synchronized training batch norm as an autograd function (PyTorch's
// torch.nn.modules._functions.SyncBatchNorm). `momentum` is the factor
// actually applied to the running statistics (defined or both undefined);
// weight / bias optional; `group` must not be null.
//   y = SyncBatchNormFunction::apply(x, weight, bias, running_mean, running_var, eps, momentum, group);
struct SyncBatchNormFunction : autograd::Function<SyncBatchNormFunction> {
  static constexpr const char* kName = "SyncBatchNorm";
  static Tensor forward(AutogradContext* ctx, const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const Tensor& running_mean, const Tensor& running_var, double eps, double momentum,
                        const ProcessGroupPtr& group);
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs);
};

}  // namespace minidl::dist

namespace minidl::nn {

class SyncBatchNormImpl : public BatchNormImplBase {
 public:
  // process_group nullptr: the default group, looked up at each forward.
  explicit SyncBatchNormImpl(const BatchNormOptions& options, dist::ProcessGroupPtr process_group = nullptr);
  SyncBatchNormImpl(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                    bool affine = true, bool track_running_stats = true,
                    dist::ProcessGroupPtr process_group = nullptr);

  dist::ProcessGroupPtr process_group;

 protected:
  // "expected at least 2D input (got 1D input)", and C > 0.
  void check_input_dim(const Tensor& input) const override;
  // BatchNorm's forward decides the statistics and the update factor; this
  // synchronizes training batches when there are ranks to synchronize with.
  Tensor normalize(const Tensor& input, const Step& step) override;
};
MINIDL_MODULE(SyncBatchNorm);

// Replaces every BatchNorm1d/2d/3d under `model` (InstanceNorm and existing
// SyncBatchNorm layers are left alone) with a SyncBatchNorm on `process_group`
// (nullptr: the default group) that SHARES the BN's weight, bias,
// running_mean, running_var and num_batches_tracked tensors (the same tensor
// handles, so optimizers built before keep working), its options, its
// train/eval mode and its eval lock (nn::freeze_batch_norm). A BN shared under
// several names becomes one shared SyncBatchNorm. Returns the model, or the
// new SyncBatchNorm when `model` itself is a BN (as PyTorch's
// convert_sync_batchnorm). The registry changes, and so do nn::AnyModule
// members (Module::replace_module); a typed member (`nn::BatchNorm2d bn1`) keeps
// calling the old BN: hold swappable children as nn::AnyModule.
std::shared_ptr<Module> convert_sync_batch_norm(std::shared_ptr<Module> model,
                                                dist::ProcessGroupPtr process_group = nullptr);

}  // namespace minidl::nn
