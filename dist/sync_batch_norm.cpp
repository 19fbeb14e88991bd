// SyncBatchNorm (PyTorch's torch/nn/modules/_functions.py SyncBatchNorm and
// batchnorm.py SyncBatchNorm), over any ProcessGroup, on any device: every
// tensor it makes lives on the input's device. Per channel c,
// rank k holds n_k = numel / C values (n_k may be 0):
//   forward:  (mean_k, invstd_k) = batch_norm_stats(x_k)
//             all-gather [mean_k(C), invstd_k(C), n_k]   (float64: exact counts)
//             (mean, invstd) = Chan's count-weighted merge over ranks with n_k >= 1,
//               running stats updated with the global unbiased var_n / (n - 1)
//             y_k = (x_k - mean) invstd weight + bias
//   backward: local sum_dy = sum dy, sum_dy_xmu = sum dy (x - mean)
//             all-reduce(SUM) [sum_dy, sum_dy_xmu]
//             dx_k = (dy - sum_dy / n - (x - mean) invstd^2 sum_dy_xmu / n) invstd weight
//             dweight_k = local sum_dy_xmu invstd, dbias_k = local sum_dy
//               (LOCAL, as PyTorch: the sum over ranks is the global gradient;
//               DDP's gradient all-reduce does the rest)
// Saves the (contiguous) input, the weight, the global mean and invstd and the
// gathered counts; the process group goes in saved_data as a handle (below).
// Gradients are fresh tensors; the engine accumulates them.
// No step reads device memory on the host: the merge, the backward's total
// count and weighted sums run as kernels on the input's device
// (ops/batch_norm_sync.h); the only host traffic is Gloo's staging of the two
// collectives (none with a device-native backend).
// Differences from PyTorch, on purpose: CPU tensors are accepted; a rank whose
// batch is empty gets zero weight/bias gradients instead of None (so a DDP
// bucket sees a gradient from every rank); on the CPU, a global batch of one
// value per channel raises BatchNorm's error on every rank instead of writing
// a NaN running_var (a device run, which would need a host read to check,
// writes it, as PyTorch).
#include "minidl/dist/sync_batch_norm.h"

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/check.h"
#include "minidl/dist/distributed.h"
#include "minidl/ops/batch_norm.h"
#include "minidl/ops/shape_ops.h"

namespace minidl::dist {

namespace {

// saved_data holds plain values only, so the backward finds the forward's
// group through a small table of weak references: a graph kept around after
// destroy_process_group() gets a clear error instead of a dangling group.
class GroupHandles {
 public:
  int64_t remember(const ProcessGroupPtr& group) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = handles_.begin(); it != handles_.end();) {
      ProcessGroupPtr known = it->second.lock();
      if (!known) {
        it = handles_.erase(it);
      } else if (known == group) {
        return it->first;
      } else {
        ++it;
      }
    }
    handles_.emplace(next_id_, group);
    return next_id_++;
  }
  ProcessGroupPtr find(int64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = handles_.find(id);
    ProcessGroupPtr group = it == handles_.end() ? nullptr : it->second.lock();
    MINIDL_CHECK(group != nullptr,
                 "SyncBatchNorm backward: the process group of the forward pass no longer exists (was "
                 "destroy_process_group() called between forward and backward?)");
    return group;
  }

 private:
  std::mutex mutex_;
  std::map<int64_t, std::weak_ptr<ProcessGroup>> handles_;
  int64_t next_id_ = 0;
};

GroupHandles& group_handles() {
  static GroupHandles handles;
  return handles;
}

void check_sync_input(const Tensor& input) {
  MINIDL_CHECK(input.defined(), "SyncBatchNorm: the input tensor is undefined");
  MINIDL_CHECK(input.dim() >= 2, "expected at least 2D input (got ", input.dim(), "D input)");
  MINIDL_CHECK(input.size(1) != 0, "SyncBatchNorm number of input channels should be non-zero");
}

}  // namespace

Tensor SyncBatchNormFunction::forward(AutogradContext* ctx, const Tensor& input, const Tensor& weight,
                                      const Tensor& bias, const Tensor& running_mean, const Tensor& running_var,
                                      double eps, double momentum, const ProcessGroupPtr& group) {
  check_sync_input(input);
  MINIDL_CHECK(group != nullptr, "SyncBatchNorm: the process group is null");
  // A float16/bfloat16 input (autocast; or a model cast to 16 bits whole)
  // goes to the building blocks as it is, with float32 or same-dtype weight,
  // bias and running statistics, as PyTorch's: they compute in float32/double
  // and round the output once; the statistics and sums that cross ranks are
  // float32 (pytorch/pytorch#98332), the counts float64.
  const Tensor x = input.contiguous();
  const int64_t C = x.size(1);
  const int64_t W = group->size();
  if (W < 2)  // with more ranks, one value here is fine: the others bring more
    MINIDL_CHECK(x.numel() / C != 1, "Expected more than 1 value per channel when training, got input size ",
                 shape_str(x.shape()));

  // An empty rank sends zeros and count 0, but still joins the all-gather.
  // Everything stays on the input's device.
  const TensorOptions f64 = TensorOptions(kFloat64).device(x.device());
  const BatchNormStats local = batch_norm_stats(x, eps);
  const Tensor packed = cat({local.mean.to(kFloat64), local.invstd.to(kFloat64),
                             full({1}, static_cast<double>(local.count), f64)});
  Tensor gathered = empty({W * (2 * C + 1)}, f64);
  group->all_gather_into_tensor(gathered, packed)->wait();
  const Tensor rows = gathered.reshape({W, 2 * C + 1});
  const Tensor means = rows.narrow(1, 0, C).contiguous();
  const Tensor invstds = rows.narrow(1, C, C).contiguous();
  const Tensor counts = rows.narrow(1, 2 * C, 1).contiguous().reshape({W});

  // Every rank sees the same counts, so every rank raises this together. The
  // check reads the counts on the host: free on the CPU; on a device it would
  // be a synchronizing read per step, so a device run does not check (as
  // PyTorch, whose running_var then becomes non-finite).
  if (x.device().is_cpu()) {
    double total = 0;
    for (double n : counts.to_vector<double>()) total += n;
    MINIDL_CHECK(total != 1, "Expected more than 1 value per channel when training, got input size ",
                 shape_str(x.shape()), " on this rank and 1 value per channel over all ", W, " ranks");
  }

  // Ranks with count 0 weigh zero in the merge (a device kernel: no host
  // read); running stats use the global count.
  auto [mean, invstd] =
      batch_norm_gather_stats_with_counts(x, means, invstds, running_mean, running_var, momentum, eps, counts);

  ctx->save_for_backward({x, weight, mean, invstd, counts});
  ctx->saved_data["group"] = group_handles().remember(group);
  return batch_norm_elemt(x, weight, bias, mean, invstd, eps);  // empty in, empty out
}

variable_list SyncBatchNormFunction::backward(AutogradContext* ctx, variable_list grad_outputs) {
  const variable_list saved = ctx->get_saved_variables();
  const Tensor &weight = saved[1], &mean = saved[2], &invstd = saved[3], &counts = saved[4];
  const Tensor& x = saved[0];
  const ProcessGroupPtr group = group_handles().find(ctx->saved_data.at("group").to_int());
  const Tensor dy = grad_outputs[0].contiguous();
  const int64_t C = x.size(1);
  const bool input_g = ctx->needs_input_grad(0);
  const bool weight_g = ctx->needs_input_grad(1) && weight.defined();
  const bool bias_g = ctx->needs_input_grad(2);

  Tensor grad_input, grad_weight, grad_bias;
  if (x.numel() > 0) {
    const BatchNormBackwardReduce local =
        batch_norm_backward_reduce(dy, x, mean, invstd, weight, input_g, weight_g, bias_g);
    if (input_g) {
      Tensor sums = cat({local.sum_dy, local.sum_dy_xmu});
      group->all_reduce(sums, ReduceOp::SUM)->wait();
      grad_input = batch_norm_backward_elemt(dy, x, mean, invstd, weight, sums.narrow(0, 0, C),
                                             sums.narrow(0, C, C), counts);
    }
    grad_weight = local.grad_weight;
    grad_bias = local.grad_bias;
  } else {
    // Nothing to contribute, but the peers wait for this rank's all-reduce, in
    // the dtype theirs has (float32 for a 16-bit input: mean's dtype).
    if (input_g) {
      Tensor sums = zeros({2 * C}, mean.options());
      group->all_reduce(sums, ReduceOp::SUM)->wait();
      grad_input = zeros(x.shape(), x.options());
    }
    // Parameter gradients in the weight's dtype, as batch_norm_backward_reduce's.
    const TensorOptions param_opts = weight.defined() ? weight.options() : x.options();
    if (weight_g) grad_weight = zeros({C}, param_opts);
    if (bias_g) grad_bias = zeros({C}, param_opts);
  }
  // input, weight, bias, running_mean, running_var, eps, momentum, group
  return {grad_input, grad_weight, grad_bias, Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
}

}  // namespace minidl::dist

namespace minidl::nn {

SyncBatchNormImpl::SyncBatchNormImpl(const BatchNormOptions& options, dist::ProcessGroupPtr process_group_)
    : BatchNormImplBase("SyncBatchNorm", options), process_group(std::move(process_group_)) {}

SyncBatchNormImpl::SyncBatchNormImpl(int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                                     bool track_running_stats, dist::ProcessGroupPtr process_group_)
    : SyncBatchNormImpl(BatchNormOptions(num_features)
                            .eps(eps)
                            .momentum(momentum)
                            .affine(affine)
                            .track_running_stats(track_running_stats),
                        std::move(process_group_)) {}

void SyncBatchNormImpl::check_input_dim(const Tensor& input) const {
  MINIDL_CHECK(input.dim() >= 2, "expected at least 2D input (got ", input.dim(), "D input)");
  MINIDL_CHECK(input.size(1) != 0, "SyncBatchNorm number of input channels should be non-zero");
}

Tensor SyncBatchNormImpl::normalize(const Tensor& input, const Step& step) {
  // Synchronize only training batches (not eval, even without running stats),
  // and only with someone to synchronize with.
  dist::ProcessGroupPtr group;
  if (step.use_batch_stats && is_training() && (process_group || dist::is_initialized())) {
    group = process_group ? process_group : dist::default_group();
    if (group->size() < 2) group = nullptr;
  }
  if (!group) return BatchNormImplBase::normalize(input, step);
  return dist::SyncBatchNormFunction::apply(input, weight, bias, step.running_mean, step.running_var, options.eps(),
                                            step.momentum, group);
}

namespace {

bool is_plain_batch_norm(const Module& m) {
  return dynamic_cast<const BatchNormImplBase*>(&m) != nullptr && dynamic_cast<const SyncBatchNormImpl*>(&m) == nullptr;
}

// A SyncBatchNorm holding bn's very tensors: built without any (affine and
// tracking off), then the reserved names are filled with bn's handles.
std::shared_ptr<SyncBatchNormImpl> make_sync_batch_norm(const BatchNormImplBase& bn,
                                                        const dist::ProcessGroupPtr& group) {
  auto sync = std::make_shared<SyncBatchNormImpl>(
      BatchNormOptions(bn.options).affine(false).track_running_stats(false), group);
  if (bn.weight.defined()) sync->weight = sync->register_parameter("weight", bn.weight, bn.weight.requires_grad());
  if (bn.bias.defined()) sync->bias = sync->register_parameter("bias", bn.bias, bn.bias.requires_grad());
  if (bn.running_mean.defined()) sync->running_mean = sync->register_buffer("running_mean", bn.running_mean);
  if (bn.running_var.defined()) sync->running_var = sync->register_buffer("running_var", bn.running_var);
  if (bn.num_batches_tracked.defined())
    sync->num_batches_tracked = sync->register_buffer("num_batches_tracked", bn.num_batches_tracked);
  sync->options = bn.options;
  sync->train(bn.is_training());
  if (bn.is_eval_locked()) sync->set_eval_locked(true);
  return sync;
}

}  // namespace

std::shared_ptr<Module> convert_sync_batch_norm(std::shared_ptr<Module> model, dist::ProcessGroupPtr process_group) {
  MINIDL_CHECK(model != nullptr, "convert_sync_batch_norm: the model is empty (nullptr)");
  if (is_plain_batch_norm(*model))
    return make_sync_batch_norm(dynamic_cast<const BatchNormImplBase&>(*model), process_group);

  // old BN -> (old BN kept alive while converting, its SyncBatchNorm)
  std::map<const Module*, std::pair<std::shared_ptr<Module>, std::shared_ptr<Module>>> converted;
  std::set<const Module*> visited{model.get()};
  std::function<void(Module&)> visit = [&](Module& parent) {
    for (const auto& [name, child] : parent.named_children()) {  // a copy: safe to replace while iterating
      if (is_plain_batch_norm(*child)) {
        auto& entry = converted[child.get()];
        if (!entry.second)
          entry = {child, make_sync_batch_norm(dynamic_cast<const BatchNormImplBase&>(*child), process_group)};
        parent.replace_module(name, entry.second);
      } else if (visited.insert(child.get()).second) {
        visit(*child);
      }
    }
  };
  visit(*model);
  return model;
}

}  // namespace minidl::nn
