// Reducer: the gradient synchronization inside DistributedDataParallel
// (PyTorch's c10d::Reducer, torch/csrc/distributed/c10d/reducer.cpp).
//
// The parameters that require grad are packed into buckets, each one flat
// tensor of one dtype. A post-accumulate-grad hook on every parameter copies
// its fresh .grad into its bucket's slot; when the last slot of a bucket is
// filled, the bucket's all-reduce (SUM) is launched asynchronously, so the
// communication overlaps the rest of backward. Buckets are launched strictly
// in bucket order (a bucket that fills early waits for the ones before it):
// every rank must issue the same collectives in the same order. A callback
// queued on the autograd engine (autograd::queue_callback) runs when the
// backward ends: it waits for every all-reduce, divides by the world size and
// copies the averages back into each parameter's .grad.
//
// One iteration, as DDP drives it:
//   forward:  ensure_prior_reduction_finished()   (grad mode on)
//             prepare_for_backward(outputs)       (grad mode on and syncing)
//   backward: hooks -> buckets launched -> final callback averages the grads
// Hooks that fire without a prepare_for_backward (no_sync, or a backward that
// did not come from a DDP forward) leave the gradient local.
//
// find_unused_parameters: prepare_for_backward walks the autograd graph from
// the outputs; parameters it does not reach are marked ready (with their
// current .grad, or zeros) when the first hook of the backward fires. The
// per-parameter "used" flags are all-reduced too, and a parameter that no
// rank used keeps its .grad untouched (undefined stays undefined), as PyTorch.
// Without the flag, a backward in which some parameter got no gradient leaves
// its bucket unfinished, and the next forward throws PyTorch's "Expected to
// have finished reduction in the prior iteration ..." naming those parameters.
//
// gradient_as_bucket_view (PyTorch's option of that name): each .grad is a
// view into its bucket, so the hooks copy nothing for a gradient that already
// is one (AccumulateGrad adds into the view in place) and finalize copies
// nothing back: the averaged bucket is the gradients. At construction a
// defined .grad is copied into its slot and replaced by the view; a fresh
// .grad (after zero_grad(set_to_none)) is copied into its slot by the hook
// and replaced by the view, as PyTorch's mark_variable_ready_dense. Saves one
// gradient-sized copy per step; the optimizer must then update .grad in place
// (all of minidl's do), and replacing .grad by another tensor just costs one
// copy at the next hook.
//
// Devices and streams: every tensor the reducer makes lives on the
// parameters' device, and nothing in backward blocks the host or reads device
// memory, with one exception kept from PyTorch: with find_unused_parameters,
// the all-reduced "used" flags are read on the host, lazily, only when some
// parameter was unused on this rank (the flags go up as one host-to-device
// copy per iteration, as PyTorch's local_used_map). The hooks' copies into
// the buckets, the division and the copies back into .grad run on the calling
// thread's current stream; finalize calls Work::wait() on each bucket before
// touching it, which for NCCL makes that stream wait for the all-reduce's end
// event (no host block) and for Gloo returns once the result is back on the
// device. Work::synchronize() is never called.
//
// Not implemented (PyTorch has them): rebuilding buckets from the observed
// gradient order after the first iteration, static_graph, communication
// hooks, sparse gradients, Join, and refusing detach_() on a bucket view.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "minidl/core/tensor.h"
#include "minidl/dist/process_group.h"

namespace minidl::dist {

// PyTorch's reducer.hpp constants.
inline constexpr int64_t kDefaultFirstBucketBytes = 1024 * 1024;
inline constexpr int64_t kDefaultBucketBytesCap = 25 * 1024 * 1024;

// PyTorch's compute_bucket_assignment_by_size: walks `tensors` in order and
// packs them into buckets per (dtype, device). A bucket is closed once its
// size reaches its limit (so it may exceed the limit by its last tensor); the
// first bucket of each dtype gets size_limits[0], the next size_limits[1],
// and so on, the last limit repeating. Returns positions into `tensors`, the
// buckets ordered by their first position.
std::vector<std::vector<size_t>> compute_bucket_assignment_by_size(const std::vector<Tensor>& tensors,
                                                                   const std::vector<int64_t>& size_limits);

class Reducer {
 public:
  // `params` (those requiring grad, in registration order) and their names;
  // `buckets` lists parameter indices, in launch order.
  Reducer(std::vector<Tensor> params, std::vector<std::string> names, std::vector<std::vector<size_t>> buckets,
          ProcessGroupPtr group, bool find_unused_parameters, bool gradient_as_bucket_view = false);
  ~Reducer();  // removes the hooks; waits for all-reduces still in flight
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Throws "Expected to have finished reduction in the prior iteration ..."
  // when the last synced forward's backward did not complete every bucket.
  void ensure_prior_reduction_finished() const;
  // Arms the hooks for the coming backward; with find_unused_parameters,
  // finds the parameters that `outputs` do not depend on.
  void prepare_for_backward(const std::vector<Tensor>& outputs);

  // ---- introspection (tests, teaching) ----
  size_t num_buckets() const { return buckets_.size(); }
  // Parameter indices (registration order) of bucket b, in launch order of buckets.
  const std::vector<size_t>& bucket_params(size_t b) const { return buckets_.at(b).params; }
  int64_t bucket_bytes(size_t b) const;
  Device bucket_device(size_t b) const { return buckets_.at(b).flat.device(); }  // the parameters' device
  // Bucket b's flat tensor (what is all-reduced); with gradient_as_bucket_view
  // the .grad of its parameters are views into it.
  const Tensor& bucket_tensor(size_t b) const { return buckets_.at(b).flat; }
  bool gradient_as_bucket_view() const { return as_view_; }
  // One entry per bucket launched in the current (or last) iteration: which
  // bucket, and how many parameters had their gradient ready at that moment.
  // grads_ready < num_params() means the all-reduce started while backward
  // was still producing gradients.
  struct Launch {
    size_t bucket;
    size_t grads_ready;
  };
  const std::vector<Launch>& launch_log() const { return launch_log_; }
  size_t num_params() const { return params_.size(); }
  // Parameters the last find_unused_parameters search did not reach.
  const std::vector<size_t>& unused_parameters() const { return unused_; }

 private:
  struct Bucket {
    std::vector<size_t> params;    // parameter indices
    std::vector<int64_t> offsets;  // element offset of each in `flat`
    Tensor flat;                   // contiguous, the parameters' dtype and device
    size_t pending = 0;            // parameters not ready yet this iteration
    WorkPtr work;
  };

  void autograd_hook(size_t index);
  void mark_ready(size_t index);
  void launch_ready_buckets();
  void finalize_backward();
  Tensor bucket_view(size_t index) const;  // param index's slot, shaped like the param
  bool is_bucket_view(size_t index, const Tensor& t) const;  // t is that very slot
  void wait_in_flight() noexcept;

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_, slot_of_;  // per parameter
  std::vector<HookId> hook_ids_;
  ProcessGroupPtr group_;
  bool find_unused_;
  bool as_view_;

  // Per-iteration state.
  bool expect_hooks_ = false;     // a synced forward armed this backward
  bool require_finalize_ = false;  // a gradient was marked ready, finalize not run yet
  bool finalize_queued_ = false;
  bool marked_unused_ = false;
  size_t next_bucket_ = 0;
  size_t num_ready_ = 0;
  std::vector<char> ready_;
  std::vector<size_t> unused_;
  std::vector<int64_t> locally_used_;  // since the last finalize, no_sync included
  Tensor used_flags_;                  // all-reduced copy of locally_used_
  WorkPtr used_work_;
  std::vector<Launch> launch_log_;
};

}  // namespace minidl::dist
