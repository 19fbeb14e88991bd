// The autograd graph. Each differentiable op's forward records a Node (the
// output's grad_fn) whose edges point at the nodes of its inputs; a leaf that
// requires grad is reached through its AccumulateGrad node.
//
// Naming follows PyTorch: a Node's *inputs* are the gradients of its forward
// outputs; apply() turns them into gradients of its forward inputs, one per
// next edge.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "minidl/core/tensor.h"

namespace minidl::autograd {

using variable_list = std::vector<Tensor>;
class Node;

struct Edge {
  std::shared_ptr<Node> function;
  uint32_t input_nr = 0;  // which input of `function` this gradient feeds
  bool valid() const { return function != nullptr; }
};

// Shape/dtype/device of a forward output, to make zeros for an unused output.
struct TensorMeta {
  Shape shape;
  DType dtype = kFloat32;
  Device device;
  static TensorMeta of(const Tensor& t) { return {t.shape(), t.dtype(), t.device()}; }
};

class Node {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // grads[i] is the gradient of forward output i (undefined if it got none).
  virtual variable_list apply(variable_list&& grads) = 0;
  virtual std::string name() const = 0;
  // Drops tensors saved for backward (after a backward without retain_graph).
  virtual void release_saved() {}

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  void set_next_edges(std::vector<Edge> edges) { next_edges_ = std::move(edges); }
  size_t num_inputs() const { return input_meta_.size(); }
  const TensorMeta& input_meta(size_t i) const { return input_meta_[i]; }
  uint32_t add_input_meta(const Tensor& forward_output);
  // Later-created nodes run first when several are ready (like PyTorch).
  uint64_t sequence_nr() const { return sequence_nr_; }

  // Hooks of non-leaf tensors: run on the gradient of forward output `output_nr`
  // before apply().
  HookId add_pre_hook(uint32_t output_nr, GradHook hook);
  bool remove_pre_hook(HookId id);
  void run_pre_hooks(variable_list& grads) const;

 protected:
  uint64_t sequence_nr_;
  std::vector<Edge> next_edges_;
  std::vector<TensorMeta> input_meta_;
  std::vector<std::pair<uint32_t, std::pair<HookId, GradHook>>> pre_hooks_;
};

// Accumulates the incoming gradient into a leaf's .grad, running the leaf's
// hooks before and its post-accumulate hooks after.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> variable);
  variable_list apply(variable_list&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
  const std::shared_ptr<TensorImpl>& variable() const { return variable_; }

 private:
  std::shared_ptr<TensorImpl> variable_;
  std::mutex mutex_;  // backward passes on several threads may meet at one leaf (as PyTorch's)
};

// The edge through which a gradient reaches `t`: its grad_fn, or the
// accumulator of a leaf that requires grad, or an invalid edge.
Edge gradient_edge(const Tensor& t);
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf);

// Process-unique ids for hooks.
HookId next_hook_id();

}  // namespace minidl::autograd
