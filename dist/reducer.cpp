// DDP's Reducer: gradient buckets all-reduced during backward (see reducer.h).
#include "minidl/dist/reducer.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <unordered_set>
#include <utility>

#include "minidl/core/autograd/engine.h"
#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/autograd/node.h"

namespace minidl::dist {

std::vector<std::vector<size_t>> compute_bucket_assignment_by_size(const std::vector<Tensor>& tensors,
                                                                   const std::vector<int64_t>& size_limits) {
  MINIDL_CHECK(!size_limits.empty(), "compute_bucket_assignment_by_size: expected at least one size limit");
  struct Accumulator {
    std::vector<size_t> indices;
    int64_t bytes = 0;
    size_t limit_index = 0;
  };
  std::map<std::pair<int, std::string>, Accumulator> open;  // per (dtype, device)
  std::vector<std::vector<size_t>> result;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    Accumulator& acc = open[{static_cast<int>(t.dtype()), t.device().str()}];
    acc.indices.push_back(i);
    acc.bytes += static_cast<int64_t>(t.nbytes());
    if (acc.bytes >= size_limits[acc.limit_index]) {
      result.push_back(std::move(acc.indices));
      const size_t next_limit = std::min(acc.limit_index + 1, size_limits.size() - 1);
      acc = Accumulator{};
      acc.limit_index = next_limit;
    }
  }
  for (auto& [key, acc] : open)
    if (!acc.indices.empty()) result.push_back(std::move(acc.indices));
  std::sort(result.begin(), result.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return result;
}

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names, std::vector<std::vector<size_t>> buckets,
                 ProcessGroupPtr group, bool find_unused_parameters, bool gradient_as_bucket_view)
    : params_(std::move(params)),
      names_(std::move(names)),
      group_(std::move(group)),
      find_unused_(find_unused_parameters),
      as_view_(gradient_as_bucket_view) {
  MINIDL_CHECK(group_ != nullptr, "Reducer: expected a process group, got null");
  MINIDL_CHECK(names_.size() == params_.size(), "Reducer: got ", params_.size(), " parameters but ", names_.size(),
               " names");
  const size_t n = params_.size();
  bucket_of_.assign(n, SIZE_MAX);
  slot_of_.assign(n, 0);
  for (size_t b = 0; b < buckets.size(); ++b) {
    Bucket bucket;
    int64_t numel = 0;
    for (size_t slot = 0; slot < buckets[b].size(); ++slot) {
      const size_t i = buckets[b][slot];
      MINIDL_CHECK(i < n && bucket_of_[i] == SIZE_MAX, "Reducer: parameter index ", i,
                   " is out of range or appears in two buckets");
      const Tensor& p = params_[i];
      MINIDL_CHECK(p.requires_grad(), "Reducer: parameter ", names_[i], " does not require grad");
      MINIDL_CHECK(p.dtype() == params_[buckets[b][0]].dtype() && p.device() == params_[buckets[b][0]].device(),
                   "Reducer: bucket ", b, " mixes dtypes or devices (", names_[i], ")");
      bucket_of_[i] = b;
      slot_of_[i] = slot;
      bucket.params.push_back(i);
      bucket.offsets.push_back(numel);
      numel += p.numel();
    }
    MINIDL_CHECK(!bucket.params.empty(), "Reducer: bucket ", b, " is empty");
    const Tensor& first = params_[bucket.params[0]];
    bucket.flat = zeros({numel}, first.options());
    buckets_.push_back(std::move(bucket));
  }
  for (size_t i = 0; i < n; ++i)
    MINIDL_CHECK(bucket_of_[i] != SIZE_MAX, "Reducer: parameter ", names_[i], " is in no bucket");
  ready_.assign(n, 0);
  locally_used_.assign(n, 0);
  if (as_view_) {  // PyTorch's initialize_bucket_views: existing gradients move into their slots
    NoGradGuard no_grad;
    for (size_t i = 0; i < n; ++i) {
      const Tensor grad = params_[i].grad();
      if (!grad.defined()) continue;
      Tensor slot = bucket_view(i);
      slot.copy_(grad);
      params_[i].set_grad(slot);
    }
  }
  for (size_t i = 0; i < n; ++i)
    hook_ids_.push_back(params_[i].register_post_accumulate_grad_hook([this, i](Tensor&) { autograd_hook(i); }));
}

Reducer::~Reducer() {
  for (size_t i = 0; i < hook_ids_.size(); ++i) {
    try {
      params_[i].remove_hook(hook_ids_[i]);
    } catch (...) {  // destructors never throw
    }
  }
  wait_in_flight();
}

void Reducer::wait_in_flight() noexcept {
  // Orders whatever runs next after the collectives still in flight (the
  // backend keeps their tensors alive) and swallows their errors.
  for (Bucket& b : buckets_) {
    if (!b.work) continue;
    try {
      b.work->wait();
    } catch (...) {
    }
    b.work.reset();
  }
  if (used_work_) {
    try {
      used_work_->wait();
    } catch (...) {
    }
    used_work_.reset();
  }
}

int64_t Reducer::bucket_bytes(size_t b) const { return static_cast<int64_t>(buckets_.at(b).flat.nbytes()); }

// A parameter's slot of its bucket, laid out as the parameter (PyTorch's
// bucket views: a channels-last weight gets a channels-last gradient, which
// the optimizer walks with it as flat arrays).
Tensor Reducer::bucket_view(size_t index) const {
  const Bucket& b = buckets_[bucket_of_[index]];
  const Tensor& p = params_[index];
  const Tensor slot = b.flat.narrow(0, b.offsets[slot_of_[index]], p.numel());
  if (!p.is_contiguous() && is_non_overlapping_and_dense(p))
    return make_view(slot, p.shape(), p.strides(), slot.storage_offset());
  return slot.view(p.shape());
}

// bucket_view's slot and layout, without making the view (twice a parameter a step).
bool Reducer::is_bucket_view(size_t index, const Tensor& t) const {
  const Bucket& b = buckets_[bucket_of_[index]];
  const Tensor& p = params_[index];
  if (!t.defined() || t.impl()->storage != b.flat.impl()->storage ||
      t.storage_offset() != b.flat.storage_offset() + b.offsets[slot_of_[index]] || t.shape() != p.shape())
    return false;
  return !p.is_contiguous() && is_non_overlapping_and_dense(p) ? t.strides() == p.strides() : t.is_contiguous();
}

void Reducer::ensure_prior_reduction_finished() const {
  if (!require_finalize_) return;
  std::ostringstream msg;
  msg << "Expected to have finished reduction in the prior iteration before starting a new one. This error "
         "indicates that your module has parameters that were not used in producing loss. ";
  if (!find_unused_) {
    msg << "You can enable unused parameter detection by passing the keyword argument "
           "`find_unused_parameters=True` (dist::DDPOptions().find_unused_parameters(true)) to "
           "DistributedDataParallel, and by making sure all `forward` function outputs participate in "
           "calculating loss.";
  } else {
    msg << "Since `find_unused_parameters=True` is enabled, this likely means that not all `forward` outputs "
           "participate in computing loss. You can fix this by making sure all `forward` function outputs "
           "participate in calculating loss.";
  }
  msg << "\nParameter indices which did not receive grad for rank " << group_->rank() << ":";
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) msg << " " << i;
  msg << "\nParameters which did not receive grad for rank " << group_->rank() << ": ";
  bool first = true;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    msg << (first ? "" : ", ") << names_[i];
    first = false;
  }
  MINIDL_FAIL(msg.str());
}

void Reducer::prepare_for_backward(const std::vector<Tensor>& outputs) {
  expect_hooks_ = true;
  finalize_queued_ = false;
  marked_unused_ = false;
  next_bucket_ = 0;
  num_ready_ = 0;
  std::fill(ready_.begin(), ready_.end(), 0);
  for (Bucket& b : buckets_) b.pending = b.params.size();
  launch_log_.clear();
  unused_.clear();
  if (!find_unused_) return;

  // Every leaf accumulator reachable from the outputs; parameters whose
  // accumulator is not among them get no gradient from this forward.
  std::unordered_set<const TensorImpl*> reached;
  std::unordered_set<const autograd::Node*> seen;
  std::vector<std::shared_ptr<autograd::Node>> stack;
  for (const Tensor& out : outputs) {
    if (!out.defined()) continue;
    autograd::Edge e = autograd::gradient_edge(out);
    if (e.valid() && seen.insert(e.function.get()).second) stack.push_back(e.function);
  }
  while (!stack.empty()) {
    std::shared_ptr<autograd::Node> node = std::move(stack.back());
    stack.pop_back();
    if (auto* acc = dynamic_cast<autograd::AccumulateGrad*>(node.get())) reached.insert(acc->variable().get());
    for (const autograd::Edge& e : node->next_edges())
      if (e.valid() && seen.insert(e.function.get()).second) stack.push_back(e.function);
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (!reached.count(params_[i].impl())) unused_.push_back(i);
}

void Reducer::autograd_hook(size_t index) {
  locally_used_[index] = 1;
  if (!expect_hooks_) return;  // no_sync, or a backward DDP did not arm: keep the gradient local
  if (find_unused_ && !marked_unused_) {
    marked_unused_ = true;
    for (size_t i : unused_) mark_ready(i);
  }
  MINIDL_CHECK(!ready_[index],
               "Expected to mark a variable ready only once. This error is caused by one of the following "
               "reasons: 1) Use of a module parameter outside the `forward` function. Please make sure model "
               "parameters are not shared across multiple concurrent forward-backward passes. 2) Reused "
               "parameters in multiple reentrant backward passes. Parameter at index ",
               index, " with name ", names_[index], " has been marked as ready twice.");
  mark_ready(index);
}

void Reducer::mark_ready(size_t index) {
  NoGradGuard no_grad;
  Tensor grad = params_[index].grad();
  if (!is_bucket_view(index, grad)) {  // a bucket view already holds its gradient
    Tensor slot = bucket_view(index);
    if (grad.defined()) {
      slot.copy_(grad);
      if (as_view_) params_[index].set_grad(slot);
    } else {
      slot.zero_();  // an unused parameter contributes zeros; its .grad stays undefined
    }
  }
  ready_[index] = 1;
  // A reduction has begun and must finish before the next forward (PyTorch
  // arms this in mark_variable_ready, not in prepare_for_backward: a forward
  // whose output is dropped, or an evaluation with grad mode on, starts none).
  require_finalize_ = true;
  ++num_ready_;
  if (--buckets_[bucket_of_[index]].pending == 0) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_];
    b.work = group_->all_reduce(b.flat, ReduceOp::SUM);
    launch_log_.push_back({next_bucket_, num_ready_});
    ++next_bucket_;
  }
  if (next_bucket_ < buckets_.size() || finalize_queued_) return;
  if (find_unused_) {
    // After the last bucket, so every rank issues it at the same point.
    used_flags_ = tensor(locally_used_, {static_cast<int64_t>(locally_used_.size())}).to(params_[0].device());
    used_work_ = group_->all_reduce(used_flags_, ReduceOp::SUM);
  }
  finalize_queued_ = true;
  autograd::queue_callback([this] { finalize_backward(); });
}

void Reducer::finalize_backward() {
  NoGradGuard no_grad;
  expect_hooks_ = false;
  require_finalize_ = false;
  const double world = static_cast<double>(group_->size());
  // wait() orders this thread's stream after each all-reduce (NCCL: an event
  // wait, the host goes on); the division and the copies below queue after it.
  for (Bucket& b : buckets_) {
    WorkPtr work = std::move(b.work);
    work->wait();
    b.flat.div_(world);
  }
  // A parameter this rank used is used globally: the flags are read on the
  // host (a device read) only when some parameter was unused here, as
  // PyTorch's lazy local_used_map wait.
  std::vector<int64_t> used_anywhere;
  if (find_unused_) {
    WorkPtr work = std::move(used_work_);
    work->wait();
    if (std::find(locally_used_.begin(), locally_used_.end(), 0) != locally_used_.end())
      used_anywhere = used_flags_.to_vector<int64_t>();
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!used_anywhere.empty() && used_anywhere[i] == 0) continue;  // no rank used it: .grad stays as it was
    Tensor grad = params_[i].grad();
    if (is_bucket_view(i, grad)) continue;  // gradient_as_bucket_view: the bucket is the gradient
    Tensor average = bucket_view(i);
    if (as_view_ && !grad.defined())
      params_[i].set_grad(average);  // used elsewhere, not here (PyTorch: grad = bucket_view_in)
    else if (grad.defined())
      grad.copy_(average);
    else
      params_[i].set_grad(average.clone());
  }
  std::fill(locally_used_.begin(), locally_used_.end(), 0);
}

}  // namespace minidl::dist
