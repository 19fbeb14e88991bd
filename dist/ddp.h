// DistributedDataParallel: data-parallel training over a process group, with
// the semantics of torch.nn.parallel.DistributedDataParallel.
//
//   dist::init_process_group("gloo");                      // minidl-launch sets env://
//   auto net = models::SmallNet(...);
//   dist::DistributedDataParallel ddp(net.ptr(), dist::DDPOptions().find_unused_parameters(false));
//   auto opt = optim::SGD(ddp.module()->parameters(), 0.1, 0.9);
//   for (...) {                                            // each rank takes its own slice of the data
//     opt.zero_grad();
//     Tensor loss = cross_entropy(ddp(x), y);              // forward: also ddp.forward(x)
//     loss.backward();                                     // grads are averaged over ranks when it returns
//     opt.step();
//     log(dist::reduce_tensor(loss.detach()).item());      // the mean loss over ranks
//   }
//   { auto guard = ddp.no_sync(); ddp(x1).backward ... }   // gradient accumulation, no communication
//   if (dist::get_rank() == 0) save(ddp.module()->state_dict());
//
// Construction needs an initialized group (the default group when `group` is
// null), checks that every rank has the same parameters and buffers (count,
// shape, dtype, requires_grad; the error names the first mismatch and the
// ranks), then broadcasts every parameter and buffer from rank 0, coalesced
// into one flat tensor per dtype (at most 250 MiB each, PyTorch's
// broadcast_bucket_size), so all ranks start from rank 0's model.
//
// Gradients (dist/reducer.h): the parameters that require grad go, in reverse
// registration order (roughly the order backward produces their gradients),
// into buckets of at most bucket_cap_mb MiB (25 by default). When
// bucket_cap_mb is not set, the first bucket, which is all-reduced first, is
// capped at 1 MiB (kDefaultFirstBucketBytes), as PyTorch's buckets after their
// rebuild; an explicit bucket_cap_mb applies to every bucket (PyTorch 2.x).
// Each bucket is all-reduced asynchronously as soon as its gradients are
// ready, during backward; when backward returns, each .grad holds the average
// over ranks (sum / world size). With a mean-reduced loss, W ranks x batch B
// give the gradients of one process with batch W*B. A sum-reduced loss gives
// gradients W times smaller than that (PyTorch's documented caveat).
//
// broadcast_buffers (default true): before each forward in training mode with
// grad enabled, every buffer is broadcast from rank 0 (PyTorch's
// _sync_buffers), which overwrites the BatchNorm running statistics of the
// other ranks with rank 0's. Unlike PyTorch, an eval or no_grad forward never
// broadcasts, so evaluating on one rank alone cannot hang.
//
// gradient_as_bucket_view (default false): see dist/reducer.h.
//
// find_unused_parameters (default false): see dist/reducer.h. Without it, a
// parameter that gets no gradient makes the next forward throw
// "Expected to have finished reduction in the prior iteration ..." with the
// names of the parameters that got none (PyTorch prints them only with
// TORCH_DISTRIBUTED_DEBUG=DETAIL; we always do).
//
// Devices: the model may live on any one device type. The buckets, the
// broadcasts and the metadata collectives (the shape check) use tensors on
// the parameters' device, as PyTorch, so a device backend (NCCL) gets device
// tensors; Gloo stages them through the host. A training step reads nothing
// on the host and never blocks it (Work::wait() only orders the caller's
// stream after a collective, for NCCL); the one exception is
// find_unused_parameters' flags (dist/reducer.h). Construction reads the
// model signatures on the host (once). Packed tensors travel in the
// backend's wire_dtype (Gloo: uint8 as int64, half types as float32).
//
// State dict: unlike PyTorch, the wrapper is not itself a Module, so there is
// no "module." prefix: ddp.module()->state_dict() has the plain model's keys
// and loads straight into a model built without DDP.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "minidl/core/tensor.h"
#include "minidl/dist/process_group.h"
#include "minidl/dist/reducer.h"
#include "minidl/nn/module.h"
#include "minidl/nn/options.h"

namespace minidl::dist {

struct DDPOptions {
  // MiB per gradient bucket; unset means 25 with a 1 MiB first bucket.
  MINIDL_ARG(std::optional<double>, bucket_cap_mb) = std::nullopt;
  MINIDL_ARG(bool, broadcast_buffers) = true;
  MINIDL_ARG(bool, find_unused_parameters) = false;
  // Each .grad a view into its bucket (one gradient-sized copy less per step;
  // see dist/reducer.h).
  MINIDL_ARG(bool, gradient_as_bucket_view) = false;
};

class DistributedDataParallel {
 public:
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions options = {},
                                   ProcessGroupPtr group = nullptr);
  template <nn::ModuleHolderType Holder>
  explicit DistributedDataParallel(const Holder& module, DDPOptions options = {}, ProcessGroupPtr group = nullptr)
      : DistributedDataParallel(std::shared_ptr<nn::Module>(module.ptr()), options, std::move(group)) {}
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;
  // Movable (the reducer its hooks point at stays put), but not while a
  // no_sync() guard is alive.
  DistributedDataParallel(DistributedDataParallel&&) = default;
  DistributedDataParallel& operator=(DistributedDataParallel&&) = default;

  // The wrapped module's single-tensor forward, with the buffer broadcast
  // before it and the reducer armed after it (see the header comment).
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  // While a guard lives, forward+backward only accumulate gradients locally;
  // the first synced backward after it all-reduces the accumulated sum. The
  // forward must run inside the guard (as in PyTorch).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(&ddp), prev_(ddp.require_backward_grad_sync_) {
      ddp.require_backward_grad_sync_ = false;
    }
    ~NoSyncGuard() {
      if (ddp_) ddp_->require_backward_grad_sync_ = prev_;
    }
    NoSyncGuard(NoSyncGuard&& other) noexcept : ddp_(other.ddp_), prev_(other.prev_) { other.ddp_ = nullptr; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(NoSyncGuard&&) = delete;

   private:
    DistributedDataParallel* ddp_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }
  bool require_backward_grad_sync() const { return require_backward_grad_sync_; }

  const std::shared_ptr<nn::Module>& module() const { return module_; }
  const ProcessGroupPtr& process_group() const { return group_; }
  const DDPOptions& options() const { return options_; }
  const Reducer& reducer() const {
    MINIDL_CHECK(reducer_ != nullptr, "DistributedDataParallel: reducer() of a moved-from object");
    return *reducer_;
  }
  // The module's mode (DDP has none of its own).
  void train(bool on = true) { module_->train(on); }
  void eval() { module_->eval(); }

 private:
  void sync_buffers();

  std::shared_ptr<nn::Module> module_;
  DDPOptions options_;
  ProcessGroupPtr group_;
  std::unique_ptr<Reducer> reducer_;
  bool require_backward_grad_sync_ = true;
};

// The average over the ranks of `group` (default group when null) of a metric
// tensor, for logging: a new detached tensor (float64 for integer input); the
// argument is left unchanged. Every rank must call it.
Tensor reduce_tensor(const Tensor& tensor, const ProcessGroupPtr& group = nullptr);

// Broadcasts `tensors` from `src` in place, packed into one flat tensor per
// dtype and device of at most `buffer_bytes` (PyTorch's _broadcast_coalesced).
void broadcast_coalesced(ProcessGroup& group, const std::vector<Tensor>& tensors, int64_t buffer_bytes,
                         int src = 0);

// Checks that every rank of `group` has the same parameters and buffers
// (count, shape, dtype, requires_grad); throws on every rank otherwise, naming
// the first mismatch (PyTorch's _verify_param_shape_across_processes).
void verify_params_across_processes(ProcessGroup& group, const nn::Module& module);

}  // namespace minidl::dist
