#include "minidl/core/autograd/engine.h"

#include <queue>
#include <unordered_map>

#include "minidl/core/autocast.h"
#include "minidl/core/autograd/grad_mode.h"

namespace minidl::autograd {
namespace {

// Feeds the root gradients into the graph like any other node.
class GraphRoot final : public Node {
 public:
  GraphRoot(std::vector<Edge> edges, variable_list grads) : grads_(std::move(grads)) {
    next_edges_ = std::move(edges);
  }
  variable_list apply(variable_list&&) override { return grads_; }
  std::string name() const override { return "GraphRoot"; }

 private:
  variable_list grads_;
};

struct ReadyOrder {
  bool operator()(Node* a, Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// Sums every gradient that reaches input slot i of a node.
void accumulate(variable_list& buffer, uint32_t slot, Tensor grad) {
  Tensor& dst = buffer[slot];
  if (!dst.defined()) {
    dst = std::move(grad);
  } else {
    dst = dst.add(grad);  // out of place: dst may alias a tensor another node still reads
  }
}

// The final callbacks of the backward running on this thread (null outside
// one); a backward started from a hook gets its own list.
thread_local std::vector<std::function<void()>>* t_final_callbacks = nullptr;

class FinalCallbacksScope {
 public:
  explicit FinalCallbacksScope(std::vector<std::function<void()>>* list) : prev_(t_final_callbacks) {
    t_final_callbacks = list;
  }
  ~FinalCallbacksScope() { t_final_callbacks = prev_; }
  FinalCallbacksScope(const FinalCallbacksScope&) = delete;
  FinalCallbacksScope& operator=(const FinalCallbacksScope&) = delete;

 private:
  std::vector<std::function<void()>>* prev_;
};

// Backward passes nested on this thread (a backward started from inside a
// backward function or hook, as activation checkpointing does). Bounded, so a
// pass that restarts itself fails with an error instead of a stack overflow.
thread_local int t_reentrant_depth = 0;
constexpr int kMaxReentrantDepth = 200;

class ReentrantDepthScope {
 public:
  ReentrantDepthScope() {
    MINIDL_CHECK(t_reentrant_depth < kMaxReentrantDepth, "backward: backward passes nested ", kMaxReentrantDepth,
                 " deep on one thread (does a backward function or hook call backward() on a graph that leads ",
                 "back to itself?)");
    ++t_reentrant_depth;
  }
  ~ReentrantDepthScope() { --t_reentrant_depth; }
  ReentrantDepthScope(const ReentrantDepthScope&) = delete;
  ReentrantDepthScope& operator=(const ReentrantDepthScope&) = delete;
};

}  // namespace

void queue_callback(std::function<void()> callback) {
  MINIDL_CHECK(t_final_callbacks != nullptr,
               "queue_callback: final callbacks can only be installed during the backward pass");
  t_final_callbacks->push_back(std::move(callback));
}

void backward(const variable_list& roots, const variable_list& grads, bool retain_graph) {
  const ReentrantDepthScope depth;
  MINIDL_CHECK(grads.empty() || grads.size() == roots.size(), "backward: got ", roots.size(),
               " tensors but ", grads.size(), " gradients");
  std::vector<Edge> root_edges;
  variable_list root_grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    MINIDL_CHECK(root.defined(), "backward: tensor ", i, " is undefined");
    MINIDL_CHECK(root.requires_grad(), "element ", i,
                 " of tensors does not require grad and does not have a grad_fn");
    Tensor g = grads.empty() ? Tensor() : grads[i];
    if (!g.defined()) {
      MINIDL_CHECK(root.numel() == 1, "grad can be implicitly created only for scalar outputs; got ",
                   "a tensor of shape ", shape_str(root.shape()), ": pass a gradient to backward()");
      g = ones_like(root);
    } else {
      MINIDL_CHECK(g.shape() == root.shape(), "backward: the gradient's shape ", shape_str(g.shape()),
                   " does not match the tensor's shape ", shape_str(root.shape()));
      MINIDL_CHECK(g.dtype() == root.dtype() && g.device() == root.device(),
                   "backward: the gradient must have the tensor's dtype and device (",
                   dtype_name(root.dtype()), " on ", root.device(), "), got ", dtype_name(g.dtype()),
                   " on ", g.device());
    }
    root_edges.push_back(gradient_edge(root));
    root_grads.push_back(g.detach());
  }
  auto graph_root = std::make_shared<GraphRoot>(std::move(root_edges), std::move(root_grads));

  // Count, for every node reachable from the roots, how many edges lead into it.
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack{graph_root.get()};
  std::unordered_map<Node*, bool> seen{{graph_root.get(), true}};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& e : node->next_edges()) {
      if (!e.valid()) continue;
      Node* next = e.function.get();
      ++dependencies[next];
      if (!seen[next]) {
        seen[next] = true;
        stack.push_back(next);
      }
    }
  }

  AutoGradMode no_grad(false);  // backward formulas record no history (no double backward)
  // Each backward runs in the dtype its forward ran in: the casts are ToCopy
  // nodes in the graph, so autocast must not cast again inside backward formulas.
  amp::AutocastExcludeGuard no_autocast;
  std::vector<std::function<void()>> final_callbacks;
  FinalCallbacksScope callbacks_scope(&final_callbacks);
  std::unordered_map<Node*, variable_list> buffers;
  std::priority_queue<Node*, std::vector<Node*>, ReadyOrder> ready;
  ready.push(graph_root.get());
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    variable_list inputs;
    if (auto it = buffers.find(node); it != buffers.end()) {
      inputs = std::move(it->second);
      buffers.erase(it);
    }
    inputs.resize(node->num_inputs());
    node->run_pre_hooks(inputs);
    variable_list outputs = node->apply(std::move(inputs));
    if (!retain_graph) node->release_saved();

    const auto& edges = node->next_edges();
    MINIDL_ASSERT(outputs.size() == edges.size() || node == graph_root.get() || outputs.empty(),
                  node->name(), " returned ", outputs.size(), " gradients for ", edges.size(),
                  " inputs");
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid()) continue;
      Node* next = e.function.get();
      if (i < outputs.size() && outputs[i].defined()) {
        variable_list& buffer = buffers[next];
        buffer.resize(next->num_inputs());
        accumulate(buffer, e.input_nr, std::move(outputs[i]));
      }
      if (--dependencies[next] == 0) ready.push(next);
    }
  }
  // Indexed: a callback may queue more (push_back can reallocate).
  for (size_t i = 0; i < final_callbacks.size(); ++i) {
    std::function<void()> callback = std::move(final_callbacks[i]);
    callback();
  }
}

}  // namespace minidl::autograd
