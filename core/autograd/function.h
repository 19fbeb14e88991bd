// Pluggable autograd: the public API for defining a differentiable op, the
// same one the built-in ops use (and libtorch's custom_function.h shape).
//
//   struct Square : autograd::Function<Square> {
//     static Tensor forward(AutogradContext* ctx, const Tensor& x) {
//       ctx->save_for_backward({x});
//       return x * x;
//     }
//     static variable_list backward(AutogradContext* ctx, variable_list grads) {
//       Tensor x = ctx->get_saved_variables()[0];
//       return {grads[0] * 2.0 * x};
//     }
//   };
//   Tensor y = Square::apply(x);
//
// forward runs with grad mode off and returns a Tensor or a variable_list.
// backward gets one gradient per forward output (zeros for outputs that got
// none, unless set_materialize_grads(false)) and returns one per forward
// argument: tensors in a std::vector<Tensor> argument count one each, and a
// non-tensor argument gets an undefined Tensor(). The node is named after the
// struct ("SquareBackward"), or after `static constexpr const char* kName`.
#pragma once

#include <cstddef>
#include <cxxabi.h>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "minidl/core/autograd/grad_mode.h"
#include "minidl/core/autograd/ivalue.h"
#include "minidl/core/autograd/node.h"

namespace minidl::autograd {

class AutogradContext {
 public:
  // Tensors the backward needs. They are stored without history and checked
  // against in-place modification when read back.
  void save_for_backward(const variable_list& tensors);
  variable_list get_saved_variables() const;
  SavedData saved_data;  // non-tensor state

  bool needs_input_grad(size_t index) const;  // by forward-argument slot
  void mark_non_differentiable(const variable_list& outputs);
  void set_materialize_grads(bool value) { materialize_grads_ = value; }

  // Engine side.
  void release_saved();
  bool materialize_grads() const { return materialize_grads_; }
  bool is_non_differentiable(const Tensor& t) const;
  void set_needs_input_grad(std::vector<bool> v) { needs_input_grad_ = std::move(v); }
  void set_node_name(std::string name) { node_name_ = std::move(name); }

 private:
  struct Saved {
    Tensor tensor;
    uint64_t version;
  };
  std::vector<Saved> saved_;
  bool released_ = false;
  bool materialize_grads_ = true;
  std::vector<bool> needs_input_grad_;
  std::vector<TensorImpl*> non_differentiable_;
  std::string node_name_;
};

std::string demangled_name(const std::type_info& type);  // "Square" for minidl::Square

// The graph node of one call of a Function<T>.
template <class T>
class CppNode final : public Node {
 public:
  variable_list apply(variable_list&& grads) override;
  std::string name() const override { return static_name(); }
  static const std::string& static_name() {  // built once per Function type, not per call
    if constexpr (requires { T::kName; }) {
      static const std::string name = std::string(T::kName) + "Backward";  // a template Function names itself
      return name;
    } else {
      static const std::string name = demangled_name(typeid(T)) + "Backward";
      return name;
    }
  }
  void release_saved() override { ctx.release_saved(); }

  AutogradContext ctx;
  std::vector<bool> is_tensor_input;
  std::vector<TensorMeta> forward_input_meta;
};

namespace detail {

// Flattens forward arguments into per-slot tensors (undefined for non-tensors).
inline void collect(variable_list& out, std::vector<bool>& is_tensor, const Tensor& t) {
  out.push_back(t);
  is_tensor.push_back(true);
}
inline void collect(variable_list& out, std::vector<bool>& is_tensor, const variable_list& ts) {
  for (const Tensor& t : ts) collect(out, is_tensor, t);
}
template <class Other>
  requires(!std::is_convertible_v<const Other&, const Tensor&> &&
           !std::is_convertible_v<const Other&, const variable_list&>)
void collect(variable_list& out, std::vector<bool>& is_tensor, const Other&) {
  out.emplace_back();
  is_tensor.push_back(false);
}

// Wires outputs to `node`; returns whether any output needs grad.
void attach_outputs(const std::shared_ptr<Node>& node, AutogradContext& ctx,
                    const variable_list& inputs, variable_list& outputs);
std::vector<Edge> collect_edges(const variable_list& inputs);
variable_list validate_gradients(const std::string& name, variable_list&& grads,
                                 const std::vector<bool>& is_tensor_input,
                                 const std::vector<TensorMeta>& input_meta);
variable_list materialize(variable_list&& grads, const Node& node, bool materialize_grads);

}  // namespace detail

template <class T>
struct Function {
  template <class... Args>
  static auto apply(Args&&... args) {
    variable_list inputs;
    std::vector<bool> is_tensor;
    inputs.reserve(sizeof...(Args));  // one slot per argument, more for tensor lists
    (detail::collect(inputs, is_tensor, args), ...);

    std::vector<bool> needs_grad(inputs.size(), false);
    bool any_needs_grad = false;
    if (GradMode::is_enabled()) {
      for (size_t i = 0; i < inputs.size(); ++i) {
        needs_grad[i] = inputs[i].defined() && inputs[i].requires_grad();
        any_needs_grad = any_needs_grad || needs_grad[i];
      }
    }

    auto node = std::make_shared<CppNode<T>>();
    node->ctx.set_needs_input_grad(std::move(needs_grad));
    node->ctx.set_node_name(CppNode<T>::static_name());
    node->is_tensor_input = std::move(is_tensor);

    using Result = decltype(T::forward(&node->ctx, std::forward<Args>(args)...));
    static_assert(std::is_same_v<Result, Tensor> || std::is_same_v<Result, variable_list>,
                  "Function::forward must return a Tensor or a variable_list");
    variable_list outputs;
    {
      AutoGradMode no_grad(false);
      if constexpr (std::is_same_v<Result, Tensor>)
        outputs = {T::forward(&node->ctx, std::forward<Args>(args)...)};
      else
        outputs = T::forward(&node->ctx, std::forward<Args>(args)...);
    }
    if (any_needs_grad) {
      for (const Tensor& t : inputs)
        node->forward_input_meta.push_back(t.defined() ? TensorMeta::of(t) : TensorMeta{});
      node->set_next_edges(detail::collect_edges(inputs));
      detail::attach_outputs(node, node->ctx, inputs, outputs);
    }
    if constexpr (std::is_same_v<Result, Tensor>)
      return outputs[0];
    else
      return outputs;
  }
};

template <class T>
variable_list CppNode<T>::apply(variable_list&& grads) {
  variable_list in = detail::materialize(std::move(grads), *this, ctx.materialize_grads());
  variable_list out = T::backward(&ctx, std::move(in));
  return detail::validate_gradients(name(), std::move(out), is_tensor_input, forward_input_meta);
}

}  // namespace minidl::autograd

namespace minidl {
using autograd::AutogradContext;
using autograd::variable_list;
}  // namespace minidl
