#include "minidl/core/autograd/node.h"

#include <atomic>
#include <limits>

#include "minidl/core/autograd/grad_mode.h"

namespace minidl::autograd {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
std::atomic<HookId> g_next_hook_id{1};
}  // namespace

HookId next_hook_id() { return g_next_hook_id++; }

Node::Node() : sequence_nr_(g_next_sequence_nr++) {}

uint32_t Node::add_input_meta(const Tensor& forward_output) {
  input_meta_.push_back(TensorMeta::of(forward_output));
  return static_cast<uint32_t>(input_meta_.size() - 1);
}

HookId Node::add_pre_hook(uint32_t output_nr, GradHook hook) {
  const HookId id = next_hook_id();
  pre_hooks_.push_back({output_nr, {id, std::move(hook)}});
  return id;
}

bool Node::remove_pre_hook(HookId id) {
  for (auto it = pre_hooks_.begin(); it != pre_hooks_.end(); ++it) {
    if (it->second.first == id) {
      pre_hooks_.erase(it);
      return true;
    }
  }
  return false;
}

void Node::run_pre_hooks(variable_list& grads) const {
  for (const auto& [output_nr, hook] : pre_hooks_) {
    Tensor& g = grads[output_nr];
    if (!g.defined()) continue;
    Tensor replaced = hook.second(g);
    if (replaced.defined()) g = replaced;
  }
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> variable) : variable_(std::move(variable)) {
  // Accumulation should happen as soon as a leaf's gradient is complete (DDP
  // starts its all-reduce from here), so it outranks every other ready node.
  sequence_nr_ = std::numeric_limits<uint64_t>::max();
  input_meta_.push_back({variable_->shape, variable_->dtype, variable_->device()});
}

variable_list AccumulateGrad::apply(variable_list&& grads) {
  Tensor g = std::move(grads[0]);
  if (!g.defined()) return {};
  for (const auto& [id, hook] : variable_->hooks) {
    Tensor replaced = hook(g);
    if (replaced.defined()) g = replaced;
  }
  Tensor var(variable_);
  MINIDL_CHECK(g.shape() == var.shape() && g.dtype() == var.dtype(),
               "AccumulateGrad: the gradient (", dtype_name(g.dtype()), " ", shape_str(g.shape()),
               ") does not match the leaf tensor (", dtype_name(var.dtype()), " ",
               shape_str(var.shape()), ")");
  NoGradGuard no_grad;
  std::unique_lock<std::mutex> lock(mutex_);  // two threads' passes adding into one .grad
  if (!variable_->grad) {
    // Steal the buffer when nobody else can see it; otherwise copy, since the
    // same gradient tensor may feed several leaves and .grad is updated in place.
    // Laid out as the leaf (PyTorch's layout contract: a channels-last leaf
    // gets a channels-last .grad, every other one a contiguous .grad).
    const bool unaliased = g.impl_ptr().use_count() == 1 && g.impl()->storage.use_count() == 1;
    const MemoryFormat fmt = var.suggest_memory_format();
    if (unaliased && g.is_contiguous(fmt) && (fmt != MemoryFormat::Contiguous || g.is_contiguous())) {
      variable_->grad = g.impl_ptr();
    } else {
      Tensor copy = empty(g.shape(), g.options(), fmt);
      copy.copy_(g);
      variable_->grad = copy.impl_ptr();
    }
  } else {
    Tensor(variable_->grad).add_(g);
  }
  lock.unlock();
  for (const auto& [id, hook] : variable_->post_accumulate_hooks) hook(var);
  return {};
}

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  TensorImpl* impl = leaf.impl();
  MINIDL_ASSERT(impl->grad_fn == nullptr && impl->requires_grad);
  static std::mutex creating;  // one accumulator per leaf, also when threads build graphs on it at once
  const std::lock_guard<std::mutex> lock(creating);
  std::shared_ptr<Node> acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
    impl->grad_accumulator = acc;
  }
  return acc;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.output_nr()};
  if (t.requires_grad()) return {grad_accumulator(t), 0};
  return {};
}

}  // namespace minidl::autograd
