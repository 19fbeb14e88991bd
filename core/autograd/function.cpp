#include "minidl/core/autograd/function.h"

#include <algorithm>
#include <cstdlib>

namespace minidl::autograd {

void AutogradContext::save_for_backward(const variable_list& tensors) {
  saved_.clear();
  for (const Tensor& t : tensors) {
    // Saved without history: keeping an output's grad_fn here would make a
    // reference cycle (output -> node -> ctx -> output).
    saved_.push_back({t.defined() ? t.detach() : Tensor(), t.defined() ? t.version() : 0});
  }
}

variable_list AutogradContext::get_saved_variables() const {
  MINIDL_CHECK(!released_,
               "Trying to backward through the graph a second time (or directly access saved "
               "tensors after they have already been freed). Saved intermediate values of the "
               "graph are freed when you call .backward(). Specify retain_graph=true if you need "
               "to backward through the graph a second time (in ", node_name_, ")");
  variable_list out;
  out.reserve(saved_.size());
  for (size_t i = 0; i < saved_.size(); ++i) {
    const Saved& s = saved_[i];
    if (s.tensor.defined()) {
      MINIDL_CHECK(s.tensor.version() == s.version,
                   "one of the variables needed for gradient computation has been modified by an "
                   "inplace operation: [", dtype_name(s.tensor.dtype()), " ",
                   shape_str(s.tensor.shape()), "], saved by ", node_name_, " as tensor ", i,
                   ", is at version ", s.tensor.version(), "; expected version ", s.version,
                   " instead.");
    }
    out.push_back(s.tensor);
  }
  return out;
}

bool AutogradContext::needs_input_grad(size_t index) const {
  MINIDL_CHECK(index < needs_input_grad_.size(), "needs_input_grad: index ", index,
               " out of range for ", needs_input_grad_.size(), " forward arguments");
  return needs_input_grad_[index];
}

void AutogradContext::mark_non_differentiable(const variable_list& outputs) {
  for (const Tensor& t : outputs) non_differentiable_.push_back(t.impl());
}

bool AutogradContext::is_non_differentiable(const Tensor& t) const {
  return std::find(non_differentiable_.begin(), non_differentiable_.end(), t.impl()) !=
         non_differentiable_.end();
}

void AutogradContext::release_saved() {
  saved_.clear();
  released_ = true;
}

std::string demangled_name(const std::type_info& type) {
  int status = 0;
  char* raw = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string name = (status == 0 && raw) ? raw : type.name();
  std::free(raw);
  // Keep the last component: "minidl::ops::(anonymous namespace)::Conv2d" -> "Conv2d".
  const size_t colon = name.rfind("::");
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

namespace detail {

std::vector<Edge> collect_edges(const variable_list& inputs) {
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor& t : inputs) edges.push_back(gradient_edge(t));
  return edges;
}

void attach_outputs(const std::shared_ptr<Node>& node, AutogradContext& ctx,
                    const variable_list& inputs, variable_list& outputs) {
  for (Tensor& out : outputs) {
    if (!out.defined()) continue;
    // An output that is one of the inputs gets a fresh handle, or we would
    // rewrite the input's history.
    for (const Tensor& in : inputs) {
      if (in.defined() && in.is_same(out)) {
        out = out.detach();
        break;
      }
    }
    MINIDL_ASSERT(out.grad_fn() == nullptr, "forward returned a tensor that already has history");
    if (ctx.is_non_differentiable(out) || !is_floating(out.dtype())) {
      node->add_input_meta(out);  // keeps output numbering; its grad is always zero
      continue;
    }
    out.impl()->grad_fn = node;
    out.impl()->output_nr = node->add_input_meta(out);
  }
}

variable_list materialize(variable_list&& grads, const Node& node, bool materialize_grads) {
  if (!materialize_grads) return std::move(grads);
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined()) continue;
    const TensorMeta& m = node.input_meta(i);
    grads[i] = zeros(m.shape, TensorOptions(m.dtype).device(m.device));
  }
  return std::move(grads);
}

variable_list validate_gradients(const std::string& name, variable_list&& grads,
                                 const std::vector<bool>& is_tensor_input,
                                 const std::vector<TensorMeta>& input_meta) {
  MINIDL_CHECK(grads.size() == is_tensor_input.size(), "function ", name,
               " returned an incorrect number of gradients (expected ", is_tensor_input.size(),
               ", got ", grads.size(), ")");
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    MINIDL_CHECK(is_tensor_input[i], "function ", name, " returned a gradient different than "
                 "an undefined tensor for non-tensor input ", i);
    if (input_meta.empty()) continue;
    const TensorMeta& m = input_meta[i];
    MINIDL_CHECK(grads[i].shape() == m.shape, "Function ", name,
                 " returned an invalid gradient at index ", i, " - got ", shape_str(grads[i].shape()),
                 " but expected shape compatible with ", shape_str(m.shape));
    MINIDL_CHECK(grads[i].dtype() == m.dtype, "Function ", name,
                 " returned an invalid gradient at index ", i, " - expected dtype ",
                 dtype_name(m.dtype), " but got ", dtype_name(grads[i].dtype()));
  }
  return std::move(grads);
}

}  // namespace detail
}  // namespace minidl::autograd
